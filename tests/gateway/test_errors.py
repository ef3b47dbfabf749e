"""Defect 2, as a class: no gateway module holds an exception INSTANCE at module level (raising a
shared instance chains every traceback onto it and keeps request bodies alive), and the client
protocol raises a fresh exception per failure from the one catalogue (gateway/protocol/codes.py)."""

from __future__ import annotations

import importlib
import pkgutil

import gateway
from gateway.errors import CommandError, DisconnectError, fail
from gateway.protocol import codes


def _gateway_modules() -> list[str]:
    return [
        m.name for m in pkgutil.walk_packages(gateway.__path__, "gateway.") if not m.name.endswith("__main__")
    ]


def test_no_module_level_exception_instances():
    shared = []
    for name in _gateway_modules():
        module = importlib.import_module(name)
        for attr, value in vars(module).items():
            if isinstance(value, BaseException):
                shared.append(f"{name}.{attr}")
    assert not shared, f"raise a fresh exception per failure instead of: {shared}"


def test_catalogue_values_are_not_exceptions_and_fail_builds_fresh_instances():
    for value in vars(codes).values():
        assert not isinstance(value, BaseException)
    first, second = fail(codes.ERROR_BAD_REQUEST), fail(codes.ERROR_BAD_REQUEST)
    assert isinstance(first, CommandError) and first is not second
    assert first.error == codes.ERROR_BAD_REQUEST
    assert isinstance(fail(codes.DISCONNECT_BAD_REQUEST), DisconnectError)


def test_a_raised_error_does_not_accumulate_tracebacks():
    def handler() -> None:
        raise fail(codes.ERROR_PERMISSION_DENIED)

    caught = []
    for _ in range(3):
        try:
            handler()
        except CommandError as exc:
            caught.append(exc)
    assert len({id(exc) for exc in caught}) == 3
    for exc in caught:
        depth, tb = 0, exc.__traceback__
        while tb is not None:
            depth, tb = depth + 1, tb.tb_next
        assert depth == 2  # this frame + handler(): nothing chained from earlier raises
