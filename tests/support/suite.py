"""How the suite is split and ordered (docs/testing.md): which tests start real processes or need
services, and the order in which pytest-xdist hands test files to its workers.

- :func:`starts_processes` reads the source of a test's module, of the ``tests.*`` modules it
  imports and of the modules that define its fixtures: a test that can reach a process factory
  (``GatewayProcess``, ``Topology``, ``subprocess``, Node.js…) is marked ``process``.
- A test that needs Redis or MariaDB (its ``redis``/``mysql`` marker or the ``redis_url`` /
  ``mysql_url`` fixtures) is marked ``services``.
- ``make test-quick`` runs what is neither (nor ``node``): pure cores and in-process tests.
- :func:`order_by_duration` puts the longest files first (``tests/durations.json``, written by
  ``scripts/test_durations.py`` from a run's JUnit XML), so that under ``--dist loadfile
  --no-loadscope-reorder`` no long file starts last and holds the run's tail.
"""

from __future__ import annotations

import functools
import json
import sys
import tokenize
import types
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Protocol, TypeVar

ROOT = Path(__file__).resolve().parents[2]
DURATIONS_FILE = ROOT / "tests" / "durations.json"
DEFAULT_FILE_SECONDS = 5.0  # a file not yet in durations.json: placed among the mid-sized ones
SERVICE_FIXTURES = frozenset({"redis_url", "mysql_url"})
SERVICE_MARKERS = frozenset({"redis", "mysql"})
# Read no further: the classifier itself and the root conftest (which guards `make test-quick`
# against processes) name the process words without starting anything.
_NOT_SCANNED = frozenset({"tests.conftest", __name__})

#: Identifiers (not words in strings or comments) through which a test can start a process.
PROCESS_NAMES = frozenset(
    {
        "GatewayProcess",
        "StatusApiProcess",
        "RelayProcess",
        "ServiceProcess",
        "Topology",
        "start_services",
        "subprocess",
        "Popen",
        "create_subprocess_exec",
        "create_subprocess_shell",
        "multiprocessing",
        "run_js",
        "node_bin",
        "fork",
        "execv",
        "execvp",
        "execve",
        "posix_spawn",
    }
)


class _Item(Protocol):
    """The parts of a ``pytest.Item`` this module reads."""

    nodeid: str
    fixturenames: Sequence[str]


@functools.cache
def _source_mentions_processes(path: str) -> bool:
    try:
        with tokenize.open(path) as source:
            return any(
                tok.type == tokenize.NAME and tok.string in PROCESS_NAMES
                for tok in tokenize.generate_tokens(source.readline)
            )
    except (OSError, SyntaxError, tokenize.TokenError):
        return True  # unreadable: assume the worst, the test stays out of the quick run


def _test_modules_imported_by(module: types.ModuleType) -> Iterable[types.ModuleType]:
    """The ``tests.*`` modules ``module`` imports, directly (``import tests.x``) or through a name
    it took from one (``from tests.x import f``)."""
    for value in vars(module).values():
        if isinstance(value, types.ModuleType):
            name = value.__name__
        else:
            name = getattr(value, "__module__", None) or ""
        if name.startswith("tests.") and name in sys.modules and name != module.__name__:
            yield sys.modules[name]


@functools.cache
def module_starts_processes(name: str) -> bool:
    """True when the module ``name`` (a loaded ``tests.*`` module) or any ``tests.*`` module it
    reaches through its imports mentions a way to start a process."""
    seen: set[str] = set()
    todo = [name]
    while todo:
        current = todo.pop()
        if current in seen or current in _NOT_SCANNED or current not in sys.modules:
            continue
        seen.add(current)
        module = sys.modules[current]
        path = getattr(module, "__file__", None)
        if path and _source_mentions_processes(path):
            return True
        todo.extend(m.__name__ for m in _test_modules_imported_by(module))
    return False


def starts_processes(test_module: str, fixture_modules: Iterable[str]) -> bool:
    """Whether a test in ``test_module`` using fixtures defined in ``fixture_modules`` may start a
    process (the ``process`` marker)."""
    return any(module_starts_processes(m) for m in (test_module, *fixture_modules) if m.startswith("tests"))


def needs_services(fixturenames: Iterable[str], markers: Iterable[str]) -> bool:
    """Whether a test needs Redis or MariaDB (the ``services`` marker)."""
    return bool(SERVICE_FIXTURES.intersection(fixturenames) or SERVICE_MARKERS.intersection(markers))


def load_durations(path: Path = DURATIONS_FILE) -> dict[str, float]:
    """``{"tests/area/test_x.py": seconds}`` from ``path``; empty when it is missing or unreadable."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return {str(k): float(v) for k, v in data.items()} if isinstance(data, dict) else {}


def file_of(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


T = TypeVar("T", bound=_Item)


def order_by_duration(items: Sequence[T], durations: Mapping[str, float]) -> list[T]:
    """``items`` with whole files in descending recorded duration (ties and unknown files keep
    their collection order); the order inside a file is unchanged."""
    first_seen: dict[str, int] = {}
    for index, item in enumerate(items):
        first_seen.setdefault(file_of(item.nodeid), index)

    def key(indexed: tuple[int, T]) -> tuple[float, int, int]:
        index, item = indexed
        path = file_of(item.nodeid)
        return (-durations.get(path, DEFAULT_FILE_SECONDS), first_seen[path], index)

    return [item for _, item in sorted(enumerate(items), key=key)]
