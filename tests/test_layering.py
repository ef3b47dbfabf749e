"""The layering of docs/architecture.md, enforced on the import graph (read with ``ast``):

* pure cores import no I/O frameworks (STYLE.md): gateway/protocol, gateway/recovery.py and
  status_api/domain; gateway/protocol imports nothing from the gateway outside itself;
* nothing imports the composition root gateway/app.py but the entry points (gateway/cli.py,
  taskcast_up.py) and tests;
* only the transports and the composition root import the connection driver gateway/client.py;
* the gateway imports neither of the other services.
"""

from __future__ import annotations

import ast
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
IO_MODULES = {
    "asyncio",
    "redis",
    "sqlalchemy",
    "starlette",
    "uvicorn",
    "websockets",
    "httpx",
    "httptools",
    "time",
    "socket",
    "ssl",
    "selectors",
    "threading",
    "subprocess",
    "asyncmy",
    "aiosqlite",
}
PURE = ["gateway/protocol", "gateway/recovery.py", "status_api/domain"]
APP_IMPORTERS = {"gateway/cli.py", "taskcast_up.py"}
CLIENT_IMPORTERS_PREFIX = "gateway/transports/"
CLIENT_IMPORTERS = {"gateway/app.py"}


def _modules(path: Path) -> list[Path]:
    return sorted(path.rglob("*.py")) if path.is_dir() else [path]


def _sources() -> list[Path]:
    """Every Python source of the three services and the top-level modules (not tests)."""
    files = [f for pkg in ("gateway", "status_api", "relay") for f in _modules(ROOT / pkg)]
    return files + sorted(ROOT.glob("taskcast_*.py"))


def _module_name(file: Path) -> str:
    parts = list(file.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(file: Path) -> set[str]:
    return _imports_of(file.read_text(), _module_name(file), is_package=file.name == "__init__.py")


def _imports_of(source: str, module: str, *, is_package: bool = False) -> set[str]:
    """Full dotted names imported by ``source`` of ``module`` (relative imports resolved;
    ``from a import b`` yields both ``a`` and ``a.b``, since ``b`` may be a module)."""
    # A fresh thread: CPython 3.11.7's ast.parse can fail with "AST constructor recursion depth
    # mismatch" when an earlier test changed the recursion limit (gh-106905).
    with ThreadPoolExecutor(1) as pool:
        tree = pool.submit(ast.parse, source).result()
    package = module.split(".") if is_package else module.split(".")[:-1]
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            module = ".".join([*base, *(node.module.split(".") if node.module else [])])
            names.add(module)
            names.update(f"{module}.{alias.name}" for alias in node.names)
    return names


def _top(names: set[str]) -> set[str]:
    return {name.split(".")[0] for name in names}


def _rel(file: Path) -> str:
    return file.relative_to(ROOT).as_posix()


@pytest.mark.parametrize("target", PURE)
def test_pure_core_has_no_io_imports(target):
    path = ROOT / target
    if not path.exists():
        pytest.skip(f"{target} not present yet")
    for file in _modules(path):
        bad = _top(_imports(file)) & IO_MODULES
        assert not bad, f"{_rel(file)} imports {sorted(bad)}"


def test_protocol_imports_nothing_of_the_gateway_outside_itself():
    for file in _modules(ROOT / "gateway/protocol"):
        bad = {n for n in _imports(file) if n.startswith("gateway.") and not n.startswith("gateway.protocol")}
        assert not bad, f"{_rel(file)} imports {sorted(bad)}"


def test_nothing_imports_the_composition_root():
    for file in _sources():
        if _rel(file) in APP_IMPORTERS:
            continue
        assert "gateway.app" not in _imports(file), f"{_rel(file)} imports gateway/app.py"


def test_only_transports_and_the_composition_root_import_the_client_driver():
    for file in _sources():
        rel = _rel(file)
        if rel.startswith(CLIENT_IMPORTERS_PREFIX) or rel in CLIENT_IMPORTERS or rel == "gateway/client.py":
            continue
        assert "gateway.client" not in _imports(file), f"{rel} imports gateway/client.py"


def test_gateway_does_not_import_other_services():
    for file in _modules(ROOT / "gateway"):
        bad = _top(_imports(file)) & {"status_api", "relay"}
        assert not bad, f"{_rel(file)} imports {sorted(bad)}"


def test_the_import_reader_sees_every_spelling():
    """The checks above are only as good as ``_imports_of``."""
    source = (
        "from .. import app\nfrom ..client import Client\nimport gateway.app as a\nfrom . import framing\n"
    )
    found = _imports_of(source, "gateway.transports.probe")
    assert {"gateway.app", "gateway.client", "gateway.transports.framing"} <= found
    assert "gateway.client" in _imports(ROOT / "gateway/transports/websocket.py")
