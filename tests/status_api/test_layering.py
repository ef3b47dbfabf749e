"""status_api/domain is pure: no asyncio, redis, sqlalchemy or starlette imports (checked with ast)."""

from __future__ import annotations

import ast
from pathlib import Path

DOMAIN = Path(__file__).resolve().parents[2] / "status_api" / "domain"
FORBIDDEN = {"asyncio", "redis", "sqlalchemy", "starlette", "time"}


def test_domain_imports_no_io_frameworks() -> None:
    offenders = []
    for path in DOMAIN.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            offenders += [f"{path.name}: {n}" for n in names if n.split(".")[0] in FORBIDDEN]
            if (
                isinstance(node, ast.Attribute)
                and node.attr in ("now", "utcnow", "today")
                and isinstance(node.value, ast.Name)
                and node.value.id in ("datetime", "date")
            ):
                offenders.append(f"{path.name}: clock read {node.value.id}.{node.attr}")
    assert offenders == []
