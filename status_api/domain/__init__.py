"""Pure task-status domain: state, registries, the ingestion state machine and projections.

Nothing here performs I/O, reads a clock or imports asyncio, redis, sqlalchemy or starlette
(tests/status_api/test_layering.py enforces it). Time arrives as arguments.
"""
