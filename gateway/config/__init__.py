"""The gateway's settings: Centrifugo's option names and nesting. ``schema`` (the option tree as
value types), ``loading`` (file and environment), ``checks`` (cross-option rules), ``unsupported``
(the options Taskcast does not implement, each with a reason), ``doc`` (the generated tables of
docs/configuration.md), ``tls`` and ``redis_address`` (option values turned into what the engine
and listeners use). Imports nothing of the gateway but the error catalogue.
"""
