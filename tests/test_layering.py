"""Package boundaries (STYLE.md Part 2, issue 14):

* pure cores import no I/O frameworks: gateway/protocol, gateway/recovery.py, status_api/domain;
* the gateway imports neither of the other services;
* the relay imports nothing of the gateway (it speaks HTTP) and, of status_api, only the outbox
  contract and the plumbing shared with the Status API (database, config file loader) — checked on
  the source (direct imports) and on a fresh interpreter (everything ``import relay.*`` loads:
  nothing of ``status_api.domain``, the service, HTTP or queries).
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FORBIDDEN = {"asyncio", "redis", "sqlalchemy", "starlette", "uvicorn", "websockets", "httpx", "time"}
PURE = ["gateway/protocol", "gateway/recovery.py", "status_api/domain"]


def _modules(path: Path) -> list[Path]:
    return sorted(path.rglob("*.py")) if path.is_dir() else [path]


#: What the relay may import from status_api: the outbox contract and the shared plumbing.
RELAY_MAY_IMPORT = ("status_api.storage.outbox", "status_api.storage.database", "status_api.config_file")
#: Every status_api module those load (the packages themselves and the table definitions).
RELAY_MAY_LOAD = frozenset(
    {"status_api", "status_api.storage", "status_api.storage.tables", *RELAY_MAY_IMPORT}
)


def _imports(file: Path) -> set[str]:
    tree = ast.parse(file.read_text(), filename=str(file))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


@pytest.mark.parametrize("target", PURE)
def test_pure_core_has_no_io_imports(target):
    path = ROOT / target
    if not path.exists():
        pytest.skip(f"{target} not present yet")
    for file in _modules(path):
        bad = _imports(file) & FORBIDDEN
        assert not bad, f"{file.relative_to(ROOT)} imports {sorted(bad)}"


def test_gateway_does_not_import_other_services():
    for file in _modules(ROOT / "gateway"):
        bad = _imports(file) & {"status_api", "relay"}
        assert not bad, f"{file.relative_to(ROOT)} imports {sorted(bad)}"


def _targets(file: Path) -> set[str]:
    """What ``file`` imports, most specific: ``import a.b`` -> a.b; ``from a.b import c`` -> a.b.c."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(file.read_text(), filename=str(file))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def _relay_may_import(name: str) -> bool:
    if name.split(".")[0] != "status_api":
        return True
    return any(name == allowed or name.startswith(allowed + ".") for allowed in RELAY_MAY_IMPORT)


def test_relay_imports_only_the_outbox_contract_and_the_shared_plumbing() -> None:
    offenders = []
    for file in _modules(ROOT / "relay"):
        for name in sorted(_targets(file)):
            if name.split(".")[0] == "gateway" or not _relay_may_import(name):
                offenders.append(f"{file.relative_to(ROOT)}: {name}")
    assert offenders == []


def test_importing_the_relay_loads_nothing_of_the_domain() -> None:
    """A fresh interpreter imports every relay module; the status_api modules it ends up with are
    the outbox contract and the plumbing (and what they need), never status_api.domain."""
    modules = sorted(p.stem for p in (ROOT / "relay").glob("*.py") if p.stem != "__main__")
    code = (
        "import importlib, json, sys\n"
        f"for m in {modules!r}: importlib.import_module('relay.' + m)\n"
        "print(json.dumps(sorted(n for n in sys.modules if n.split('.')[0] == 'status_api')))"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    loaded = set(json.loads(out.stdout))
    assert not {m for m in loaded if m.startswith("status_api.domain")}, sorted(loaded)
    assert loaded <= RELAY_MAY_LOAD, sorted(loaded - RELAY_MAY_LOAD)
