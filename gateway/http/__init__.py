"""The gateway's HTTP listeners: ``protocol`` (the HTTP/1.1 connection on httptools: keep-alive,
pipelining, bodies, head and body bounds, request deadline, WebSocket upgrade, graceful shutdown),
``cycle`` (one request handed to the ASGI app), ``server`` (the uvicorn server built from
settings, through its public ``Config(http=<class>)``), ``inline`` (server API requests answered
by the HTTP protocol itself) and ``origins`` (the Origin check of connection endpoints).
"""
