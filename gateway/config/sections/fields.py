"""Field metadata of the settings' values: how ``gateway.config.loading`` and
``gateway.config.doc`` treat a field beyond its name and type."""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

__all__ = ["DERIVED", "EXTENSION", "NUMBER_AS_STRING"]

DERIVED: Mapping[str, bool] = MappingProxyType({"derived": True})
"""Field metadata: computed at load time, not an option (an option of that name warns as unknown)."""


EXTENSION: Mapping[str, bool] = MappingProxyType({"extension": True})
"""Field metadata: a Taskcast option with no Centrifugo counterpart (marked so in the docs table)."""


NUMBER_AS_STRING: Mapping[str, bool] = MappingProxyType({"number_as_string": True})
"""Field metadata: a string option that also accepts a number (Centrifugo's string ports)."""
