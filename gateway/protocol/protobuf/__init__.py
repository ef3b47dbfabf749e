"""The Protobuf encoding of client protocol v2 (``centrifuge-protobuf``): the schema
(``client.proto``), its generated module (``client_pb2``, committed; never edit it) and
``ProtobufCodec``. Pure like the rest of gateway/protocol: no I/O imports.
"""
