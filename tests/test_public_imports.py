"""No product code imports a private name (``_x``) of another package: what one package uses of
another is that package's public interface (loadtest once imported ``status_api.config._build``)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("gateway", "status_api", "relay", "taskcast", "loadtest")


def _private_imports(path: Path) -> list[str]:
    own = path.relative_to(ROOT).parts[0]
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            top = node.module.split(".")[0]
            private_module = any(
                part.startswith("_") and part != "__future__" for part in node.module.split(".")
            )
            names = [a.name for a in node.names if a.name.startswith("_") and not a.name.startswith("__")]
            if top != own and top in PACKAGES and (names or private_module):
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}: from {node.module} import {names}")
        elif isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__"):
            base = node.value
            if isinstance(base, ast.Name) and base.id in PACKAGES and base.id != own:
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}: {base.id}.{node.attr}")
    return found


def test_no_package_imports_a_private_name_of_another() -> None:
    offenders = [
        hit
        for pkg in PACKAGES
        for path in sorted((ROOT / pkg).rglob("*.py"))
        for hit in _private_imports(path)
    ]
    assert offenders == [], "\n".join(offenders)
