"""Pure cores import no I/O frameworks (STYLE.md): gateway/protocol, gateway/recovery.py,
gateway/channels.py and status_api/domain."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FORBIDDEN = {"asyncio", "redis", "sqlalchemy", "starlette", "uvicorn", "websockets", "httpx", "time"}
PURE = ["gateway/protocol", "gateway/recovery.py", "status_api/domain"]


def _modules(path: Path) -> list[Path]:
    return sorted(path.rglob("*.py")) if path.is_dir() else [path]


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
