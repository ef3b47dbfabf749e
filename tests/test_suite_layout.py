"""The suite's own layout (tests/support/suite.py): the ``process`` / ``services`` markers that
``make test-quick`` selects on, the quick run's guard against processes, and the order in which
pytest-xdist receives whole files."""

from __future__ import annotations

import subprocess
import sys
import types
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.conftest import refuse_processes
from tests.support import suite


@dataclass
class FakeItem:
    nodeid: str
    fixturenames: list[str] = field(default_factory=list)


def test_longest_files_come_first_and_each_file_keeps_its_order() -> None:
    items = [FakeItem(n) for n in ("a.py::1", "b.py::1", "a.py::2", "c.py::1", "b.py::2", "d.py::1")]
    durations = {"a.py": 1.0, "b.py": 90.0, "c.py": 30.0}  # d.py unknown: DEFAULT_FILE_SECONDS
    ordered = [i.nodeid for i in suite.order_by_duration(items, durations)]
    assert ordered == ["b.py::1", "b.py::2", "c.py::1", "d.py::1", "a.py::1", "a.py::2"]


def test_without_durations_the_collection_order_is_kept() -> None:
    items = [FakeItem(n) for n in ("z.py::1", "a.py::1", "z.py::2")]
    assert [i.nodeid for i in suite.order_by_duration(items, {})] == ["z.py::1", "z.py::2", "a.py::1"]


def test_durations_file_is_read_and_a_broken_one_is_empty(tmp_path: Path) -> None:
    good, bad = tmp_path / "good.json", tmp_path / "bad.json"
    good.write_text('{"tests/x.py": 12.5}')
    bad.write_text("{not json")
    assert suite.load_durations(good) == {"tests/x.py": 12.5}
    assert suite.load_durations(bad) == {} and suite.load_durations(tmp_path / "missing.json") == {}
    assert suite.load_durations() != {}, "tests/durations.json is committed"


def _fake_module(tmp_path: Path, name: str, source: str, **names: object) -> types.ModuleType:
    path = tmp_path / (name.replace(".", "_") + ".py")
    path.write_text(source)
    module = types.ModuleType(name)
    module.__file__ = str(path)
    vars(module).update(names)
    sys.modules[name] = module
    return module


def test_a_module_reaching_a_process_factory_through_a_helper_starts_processes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sys, "modules", dict(sys.modules))
    helper = _fake_module(tmp_path, "tests.fake_helper", "def start():\n    return GatewayProcess(cfg)\n")

    def from_helper() -> None: ...

    from_helper.__module__ = helper.__name__
    _fake_module(
        tmp_path, "tests.fake_uses_helper", "from tests.fake_helper import from_helper\n", f=from_helper
    )
    _fake_module(tmp_path, "tests.fake_pure", "def test_x(): assert 1 + 1 == 2\n")
    assert suite.starts_processes("tests.fake_uses_helper", ())
    assert not suite.starts_processes("tests.fake_pure", ())
    assert suite.starts_processes("tests.fake_pure", ("tests.fake_helper",)), "a fixture's module counts"


def test_services_come_from_markers_or_fixtures() -> None:
    assert suite.needs_services(["tmp_path", "redis_url"], [])
    assert suite.needs_services([], ["mysql"])
    assert not suite.needs_services(["tmp_path"], ["timeout", "node"])


def test_this_suites_modules_are_classified() -> None:
    """A pure module is not ``process``; one whose tests start a gateway is; words in strings and
    docstrings do not count (only identifiers)."""
    import tests.test_cli
    import tests.test_time_bounds  # noqa: F401

    assert not suite.starts_processes("tests.test_time_bounds", ())
    assert suite.starts_processes("tests.test_cli", ())


def test_words_in_strings_do_not_count(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "modules", dict(sys.modules))
    _fake_module(tmp_path, "tests.fake_says", '"""Unlike GatewayProcess, this starts no Popen."""\n')
    assert not suite.starts_processes("tests.fake_says", ())


def test_the_quick_guard_refuses_a_process(monkeypatch: pytest.MonkeyPatch) -> None:
    refuse_processes(monkeypatch)
    with pytest.raises(AssertionError, match="make test-quick"):
        subprocess.run(["true"], check=False)
