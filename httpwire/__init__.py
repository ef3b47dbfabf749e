"""The HTTP/1.1 wire both services listen with: one ``asyncio.Protocol`` per connection over
httptools (``protocol``), the ASGI cycle of one request (``cycle``) and requests answered without
an ASGI cycle (``inline``); the OpenTelemetry tracer and W3C trace context the services share
(``tracing``); the rule their background loops follow on cancellation (``cancellation``). A
library, not a service: it imports nothing of ``gateway``, ``status_api`` or ``relay``
(tests/test_layering.py), so both services can listen with it and still share no code with each
other."""
