"""Engines: the Broker (PUB/SUB + history, atomic per channel) and the PresenceManager."""
