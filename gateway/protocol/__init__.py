"""Sans-I/O core of Centrifugo's client protocol v2: messages, codecs (JSON here, Protobuf in
``protobuf/``), codes and the session.

Nothing in this package may import asyncio, redis, starlette, uvicorn or read the clock
(tests/gateway/test_layering.py enforces it).
"""
