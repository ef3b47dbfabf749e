"""Reusable test helpers: a real gateway process and token minting."""
