"""No product module depends on a dependency's private parts, so the dependencies can be upgraded
(pyproject.toml pins none of them to a minor for that reason): nothing imports a private module
of uvicorn (``uvicorn.protocols``, ``uvicorn.lifespan``, ``uvicorn.middleware``, ``uvicorn.loops``,
``uvicorn._*``…) or of starlette (``starlette._*``), and no class subclasses a uvicorn class
other than the public ``uvicorn.Server`` (its documented programmatic use). Read with ``ast``."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("gateway", "status_api", "relay", "taskcast")
#: uvicorn's public modules: the package itself (``Config``, ``Server``, ``run``), and
#: ``uvicorn.config``/``uvicorn.server`` that define them.
UVICORN_PUBLIC = {"uvicorn", "uvicorn.config", "uvicorn.server"}
#: uvicorn classes a product class may subclass.
SUBCLASSABLE = {"uvicorn.Server", "uvicorn.server.Server"}


def _private(module: str) -> bool:
    top = module.split(".")[0]
    if top == "uvicorn":
        return module not in UVICORN_PUBLIC
    if top == "starlette":
        return any(part.startswith("_") for part in module.split("."))
    return False


def offenders(source: str, name: str) -> list[str]:
    """The private imports and uvicorn subclasses of one module's ``source``."""
    tree = ast.parse(source, name)
    found: list[str] = []
    imported: dict[str, str] = {}  # local name -> dotted origin
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if _private(alias.name):
                    found.append(f"{name}:{node.lineno}: import {alias.name}")
                imported[(alias.asname or alias.name).split(".")[0]] = alias.name.split(".")[0]
                if alias.asname:
                    imported[alias.asname] = alias.name
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                full = f"{node.module}.{alias.name}"
                if _private(node.module):
                    found.append(f"{name}:{node.lineno}: from {node.module} import {alias.name}")
                imported[alias.asname or alias.name] = full
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef):
            for base in node.bases:
                dotted = _dotted(base)
                if dotted is None:
                    continue
                head, _, rest = dotted.partition(".")
                origin = imported.get(head, head) + ("." + rest if rest else "")
                if origin.split(".")[0] == "uvicorn" and origin not in SUBCLASSABLE:
                    found.append(f"{name}:{node.lineno}: class {node.name}({origin})")
    return found


def _dotted(node: ast.expr) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        inner = _dotted(node.value)
        return None if inner is None else f"{inner}.{node.attr}"
    return None


def test_no_product_module_uses_a_private_part_of_uvicorn_or_starlette() -> None:
    found = [
        hit
        for pkg in PACKAGES
        for path in sorted((ROOT / pkg).rglob("*.py"))
        for hit in offenders(path.read_text(), str(path.relative_to(ROOT)))
    ]
    assert found == [], "\n".join(found)


def test_the_check_sees_each_spelling() -> None:
    probe = "\n".join(
        [
            "import uvicorn",
            "import uvicorn.protocols.http.httptools_impl as impl",
            "from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol",
            "from uvicorn.protocols.utils import get_local_addr",
            "from starlette._utils import is_async_callable",
            "from uvicorn.lifespan.on import LifespanOn",
            "class A(HttpToolsProtocol): pass",
            "class B(impl.HttpToolsProtocol): pass",
            "class C(uvicorn.Config): pass",
            "class D(uvicorn.Server): pass",
            "from uvicorn import Server",
            "class E(Server): pass",
        ]
    )
    hits = offenders(probe, "probe.py")
    assert [h.split(": ", 1)[1] for h in hits] == [
        "import uvicorn.protocols.http.httptools_impl",
        "from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol",
        "from uvicorn.protocols.utils import get_local_addr",
        "from starlette._utils import is_async_callable",
        "from uvicorn.lifespan.on import LifespanOn",
        "class A(uvicorn.protocols.http.httptools_impl.HttpToolsProtocol)",
        "class B(uvicorn.protocols.http.httptools_impl.HttpToolsProtocol)",
        "class C(uvicorn.Config)",
    ]
