"""The layering of docs/architecture.md, enforced on the import graph (read with ``ast``):

* the gateway's package map (``PACKAGE_MAP``): each unit (a package of gateway/, a module at its
  root, or the server API's shared request types) imports only the units listed for it, and the
  map itself has no cycle, so the units stack in layers;
* no import cycle between gateway modules, ``if TYPE_CHECKING:`` imports included (a type-only
  cycle is still two modules that cannot be read apart; a Protocol on the importing side breaks it);
* pure cores import no I/O frameworks (STYLE.md): gateway/protocol (gateway/protocol/recovery.py
  included) and status_api/domain; gateway/protocol imports nothing from the gateway outside itself;
* nothing imports the composition root gateway/app.py but the entry points (gateway/cli.py,
  taskcast/up.py) and tests;
* only the transports, the composition root and the connections' factory
  (gateway/connection/factory.py) import the connection driver gateway/connection/client.py;
* the driver's parts (gateway/connection/subscriptions.py, server_subscriptions.py, channel_commands.py)
  import only the modules listed for them in ``CONNECTION_PARTS``: the node, hub, send queue,
  policy and the other pure or engine-facing collaborators, never the driver, a transport, the
  composition root or an I/O framework — they reach the driver through their ``Driver`` /
  ``Requester`` protocols;
* the gateway imports neither of the other services;
* the relay imports nothing of the gateway (it speaks HTTP) and, of status_api, only the outbox
  contract (the row types, its claims, the operators' queries) and the plumbing shared with the
  Status API (database, config file loader) — checked on the source (direct imports) and on a
  fresh interpreter (everything ``import relay.*`` loads: nothing of ``status_api.domain``, the
  service, HTTP, the writer or the Status API's queries);
* the outbox's three owners change for one reason each: the writer (storage/write.py) appends,
  the relay's side (storage/outbox_claims.py) leases and settles, the operators' queries
  (storage/outbox_admin.py) stand apart; none of them imports another, only the contract.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
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
PURE = ["gateway/protocol", "gateway/maps", "status_api/domain"]
APP_IMPORTERS = {"gateway/cli.py", "taskcast/up.py"}
CLIENT_IMPORTERS_PREFIX = "gateway/transports/"
CLIENT_IMPORTERS = {"gateway/app.py", "gateway/connection/factory.py"}
CLIENT_DRIVER = "gateway/connection/client.py"
#: The parts of the connection driver and everything each may import (a gateway module, or a
#: name in one; anything else is stdlib typing/plumbing listed in ``CONNECTION_PARTS_STDLIB``).
CONNECTION_PARTS = {
    "gateway/connection/subscriptions.py": {
        "gateway.channels",
        "gateway.config.schema",
        "gateway.connection.authorization",
        "gateway.connection.delivery",
        "gateway.connection.personal",
        "gateway.connection.presence",
        "gateway.connection.refresh",
        "gateway.connection.sendqueue",
        "gateway.engine.base",
        "gateway.errors",
        "gateway.hub",
        "gateway.node",
        "gateway.protocol",
        "gateway.proxy.replies",  # the grant a backend stream answers with (a value type)
    },
    "gateway/connection/server_subscriptions.py": {
        "gateway.connection.personal",
        "gateway.connection.subscriptions",
        "gateway.engine.base",
        "gateway.errors",
        "gateway.protocol",
    },
    "gateway/connection/channel_commands.py": {
        "gateway.config.schema",
        "gateway.connection.authorization",
        "gateway.connection.map_writes",
        "gateway.connection.subscriptions",
        "gateway.errors",
        "gateway.node",
        "gateway.protocol",
    },
}
CONNECTION_PARTS_STDLIB = {"__future__", "collections", "functools", "logging", "typing"}


#: The gateway's package map: each unit and the units it may import. A unit is a package of
#: gateway/ (``config``, ``protocol``...), a module at gateway/'s root (``node``, ``hub``...), or
#: ``api.requests``: the server API's typed requests, which the cluster and the personal channel
#: speak too, so that unit sits below the node while the rest of ``api`` sits above it.
#: Listed bottom-up; docs/architecture.md draws the same map.
PACKAGE_MAP: dict[str, set[str]] = {
    "protocol": set(),
    "config": {"protocol"},
    "errors": {"protocol"},
    "log_limit": set(),
    "cleanup": {"log_limit"},
    "metrics": set(),
    "logging_setup": {"config"},
    "gc_pauses": {"metrics"},
    "hub": {"protocol"},
    "conflation": {"hub"},
    "channels": {"config", "protocol"},
    "api.requests": {"protocol"},
    "maps": {"config", "protocol"},
    "engine": {"config", "maps", "protocol"},
    "proxy": {"config", "log_limit", "metrics", "protocol"},
    "cluster": {"api.requests", "engine", "hub", "protocol"},
    "sharedpoll": {"config", "log_limit", "metrics", "protocol", "proxy"},
    "webhooks": {"config", "engine", "protocol"},
    "positions": {"config", "engine", "hub", "maps", "metrics", "protocol"},
    "node": {
        "cleanup",
        "cluster",
        "config",
        "conflation",
        "engine",
        "maps",
        "hub",
        "metrics",
        "positions",
        "protocol",
        "sharedpoll",
        "webhooks",
    },
    "http": {"config", "logging_setup"},
    "api": {"api.requests", "channels", "config", "engine", "http", "log_limit", "maps", "node", "protocol"},
    "connection": {
        "api.requests",
        "channels",
        "config",
        "conflation",
        "engine",
        "errors",
        "hub",
        "log_limit",
        "maps",
        "node",
        "protocol",
        "proxy",
        "sharedpoll",
    },
    "transports": {"config", "connection", "engine", "http", "hub", "protocol"},
    "consumers": {"api.requests", "config", "log_limit", "protocol"},
    "workers": {"config", "engine"},
    "admin": {"api.requests", "config", "engine", "node", "protocol"},
    "app": {
        "admin",
        "api",
        "config",
        "connection",
        "consumers",
        "engine",
        "gc_pauses",
        "http",
        "metrics",
        "node",
        "proxy",
        "sharedpoll",
        "transports",
        "webhooks",
    },
    "cli": {"app", "config", "http", "logging_setup", "workers"},
    "__main__": {"cli"},
}
#: Units that are packages: a module inside belongs to the package's unit.
GATEWAY_PACKAGES = {
    "admin",
    "api",
    "config",
    "connection",
    "consumers",
    "engine",
    "http",
    "maps",
    "protocol",
    "proxy",
    "sharedpoll",
    "transports",
    "webhooks",
}


def _modules(path: Path) -> list[Path]:
    return sorted(path.rglob("*.py")) if path.is_dir() else [path]


#: What the relay may import from status_api: the outbox contract and the shared plumbing.
RELAY_MAY_IMPORT = (
    "status_api.storage.outbox",
    "status_api.storage.outbox_claims",
    "status_api.storage.outbox_admin",
    "status_api.storage.driver_statements",
    "status_api.storage.database",
    "status_api.config_file",
    "status_api.redis_client",
)
#: The modules that own the outbox table, one reason to change each (see the module docstring).
OUTBOX_OWNERS = (
    "status_api.storage.write",
    "status_api.storage.outbox_claims",
    "status_api.storage.outbox_admin",
)
#: Every status_api module those load (the packages themselves and the table definitions).
RELAY_MAY_LOAD = frozenset(
    {"status_api", "status_api.storage", "status_api.storage.tables", *RELAY_MAY_IMPORT}
)


def _sources() -> list[Path]:
    """Every Python source of the three services and the taskcast package (not tests)."""
    return [f for pkg in ("gateway", "status_api", "relay", "taskcast") for f in _modules(ROOT / pkg)]


def _module_name(file: Path, root: Path = ROOT) -> str:
    parts = list(file.relative_to(root).with_suffix("").parts)
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
        if (
            rel.startswith(CLIENT_IMPORTERS_PREFIX)
            or rel in CLIENT_IMPORTERS
            or rel == "gateway/connection/client.py"
        ):
            continue
        assert "gateway.connection.client" not in _imports(file), (
            f"{rel} imports gateway/connection/client.py"
        )


def _forbidden(names: set[str], allowed: set[str]) -> list[str]:
    """The imports (most specific names, ``_targets``) outside ``allowed`` and the stdlib list."""

    def ok(name: str) -> bool:
        if name.split(".")[0] != "gateway":
            return name.split(".")[0] in CONNECTION_PARTS_STDLIB
        return any(name == a or name.startswith(a + ".") for a in allowed)

    return sorted(n for n in names if not ok(n))


@pytest.mark.parametrize("part", sorted(CONNECTION_PARTS))
def test_the_driver_parts_import_only_their_collaborators(part):
    """gateway/connection/subscriptions.py and gateway/connection/channel_commands.py talk to the
    driver through a Protocol: importing gateway.connection.client (or a transport, app.py,
    starlette, asyncio...) would be reaching into it."""
    bad = _forbidden(_targets(ROOT / part), CONNECTION_PARTS[part])
    assert not bad, f"{part} imports {bad}"


def test_the_driver_parts_check_sees_a_forbidden_import(tmp_path):
    """The check above, on a probe that reaches into the driver and the event loop."""
    probe = tmp_path / "probe.py"
    probe.write_text(
        "import asyncio\nfrom typing import Protocol\nfrom gateway.connection.client import Client\n"
        "from gateway.hub import SharedPush\nfrom gateway.transports import websocket\n"
    )
    allowed = CONNECTION_PARTS["gateway/connection/subscriptions.py"]
    assert _forbidden(_targets(probe), allowed) == [
        "asyncio",
        "gateway.connection.client.Client",
        "gateway.transports.websocket",
    ]


def test_gateway_does_not_import_other_services():
    for file in _modules(ROOT / "gateway"):
        bad = _top(_imports(file)) & {"status_api", "relay"}
        assert not bad, f"{_rel(file)} imports {sorted(bad)}"


def test_the_status_api_imports_nothing_of_the_gateway():
    """The services share data and the httpwire library, not code of each other."""
    for file in _modules(ROOT / "status_api"):
        bad = _top(_imports(file)) & {"gateway", "relay"}
        assert not bad, f"{_rel(file)} imports {sorted(bad)}"


def test_httpwire_is_a_library_of_no_service():
    for file in _modules(ROOT / "httpwire"):
        bad = _top(_imports(file)) & {"gateway", "status_api", "relay", "taskcast"}
        assert not bad, f"{_rel(file)} imports {sorted(bad)}"


def _targets(file: Path) -> set[str]:
    """What ``file`` imports, most specific: ``import a.b`` -> a.b; ``from a.b import c`` -> a.b.c."""
    names: set[str] = set()
    with ThreadPoolExecutor(1) as pool:  # see _imports_of
        tree = pool.submit(ast.parse, file.read_text(), str(file)).result()
    for node in ast.walk(tree):
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


def test_each_outbox_owner_imports_only_the_contract_of_the_others() -> None:
    for owner in OUTBOX_OWNERS:
        file = ROOT / (owner.replace(".", "/") + ".py")
        others = {o for o in OUTBOX_OWNERS if o != owner}
        assert not {n for n in _imports(file) if n in others}, f"{_rel(file)} imports another outbox owner"
        assert "status_api.storage.outbox" in _imports(file), f"{_rel(file)} bypasses the contract"


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


def test_the_import_reader_sees_every_spelling():
    """The checks above are only as good as ``_imports_of``."""
    source = (
        "from .. import app\nfrom ..connection.client import Client\n"
        "import gateway.app as a\nfrom . import framing\n"
    )
    found = _imports_of(source, "gateway.transports.probe")
    assert {"gateway.app", "gateway.connection.client", "gateway.transports.framing"} <= found
    assert "gateway.connection.client" in _imports(ROOT / "gateway/transports/websocket.py")


def _gateway_graph(root: Path = ROOT) -> dict[str, set[str]]:
    """Every gateway module and the gateway modules it imports, ``if TYPE_CHECKING:`` imports
    included (``from a import b`` names module ``a.b`` when that is a module, else ``a``)."""
    files = {_module_name(f, root): f for f in _modules(root / "gateway")}
    graph: dict[str, set[str]] = {}
    for name, file in files.items():
        found: set[str] = set()
        for imported in _imports_of(file.read_text(), name, is_package=file.name == "__init__.py"):
            while imported and imported not in files:
                imported = imported.rpartition(".")[0]
            if imported.startswith("gateway") and imported != name:
                found.add(imported)
        graph[name] = found
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one node (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def _unit(module: str) -> str:
    """The package-map unit of a gateway module (see ``PACKAGE_MAP``)."""
    parts = module.split(".")
    if module == "gateway.api.requests":
        return "api.requests"
    if len(parts) == 1:
        return "gateway"
    return parts[1]


def test_no_import_cycle_between_gateway_modules():
    cycles = _cycles(_gateway_graph())
    assert cycles == [], f"import cycles (type-only imports count): {cycles}"


def test_the_cycle_check_sees_a_type_only_cycle(tmp_path):
    """The check above, on a probe package whose two modules import each other, one of them only
    under ``if TYPE_CHECKING:``."""
    (tmp_path / "gateway").mkdir()
    (tmp_path / "gateway/__init__.py").write_text("")
    (tmp_path / "gateway/a.py").write_text("from gateway.b import B\n")
    (tmp_path / "gateway/b.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from gateway import a\nB = 1\n"
    )
    graph = _gateway_graph(tmp_path)
    assert _cycles(graph) == [["gateway.a", "gateway.b"]]


def test_every_gateway_module_belongs_to_a_unit_of_the_map():
    units = {_unit(m) for m in _gateway_graph()} - {"gateway"}
    assert units <= set(PACKAGE_MAP), f"not in PACKAGE_MAP: {sorted(units - set(PACKAGE_MAP))}"
    assert {u for u in units if "." not in u and (ROOT / "gateway" / u).is_dir()} <= GATEWAY_PACKAGES


def test_gateway_units_import_only_what_the_package_map_allows():
    offenders = []
    for module, imported in sorted(_gateway_graph().items()):
        unit = _unit(module)
        for target in sorted(imported):
            other = _unit(target)
            if other not in {unit, "gateway"} and other not in PACKAGE_MAP.get(unit, set()):
                offenders.append(f"{module} ({unit}) -> {target} ({other})")
    assert offenders == [], "imports outside PACKAGE_MAP:\n" + "\n".join(offenders)


def test_the_package_map_has_no_cycle():
    assert _cycles(PACKAGE_MAP) == []
    assert all(target in PACKAGE_MAP for targets in PACKAGE_MAP.values() for target in targets)
