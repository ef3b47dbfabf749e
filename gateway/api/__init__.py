"""The server API's front doors (PROTOCOL.md §6): ``executor`` (``ServerApi``, the executor of
every method), ``requests`` (the typed requests and their one parser), ``http`` (the HTTP
adapter), ``batch`` and ``inline`` (the engine-specific publish runs) and ``grpc/`` (the gRPC
adapter).
"""
