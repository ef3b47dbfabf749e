"""Charging a leaked socket to the test that leaked it.

A connection a test opens and never closes (an asyncio transport, a socket) is only reported when
the garbage collector finds it: CPython then emits a ``ResourceWarning`` that pytest raises as an
unraisable-exception failure of whichever test is running at that moment, on the same xdist worker
— often an unrelated test in a later module. With ``TASKCAST_TEST_LEAKS=1`` every test ends with a
full collection, so the warning fails the test (or fixture teardown) that leaked; add
``PYTHONTRACEMALLOC=20`` to get the traceback of the leaked object's allocation. Off by default:
a full collection after each of the suite's thousands of tests costs minutes.
"""

from __future__ import annotations

import gc
import os
from collections.abc import Iterator

import pytest

LEAKS_ENV = "TASKCAST_TEST_LEAKS"


def enabled() -> bool:
    """Whether ``TASKCAST_TEST_LEAKS`` asks for a collection after every test."""
    return os.environ.get(LEAKS_ENV, "") not in ("", "0")


class CollectAfterEachTest:
    """The pytest plugin: an autouse fixture (set up before a test's other fixtures, so torn down
    after them) whose teardown runs a full ``gc.collect()``; pytest's unraisable-exception check at
    the end of the teardown phase then charges what it finds to this test."""

    @pytest.fixture(autouse=True)
    def _collect_garbage_after_the_test(self) -> Iterator[None]:
        yield
        gc.collect()
