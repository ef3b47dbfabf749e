"""The sections of the gateway's settings (gateway/config/schema.py's ``Settings``), one module
per concept, each a set of frozen values named and nested exactly like Centrifugo v6's options.
Pure values: a section module reads no file and no environment and imports nothing from the
gateway outside this package."""
