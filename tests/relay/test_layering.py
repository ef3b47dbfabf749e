"""Relay-internal boundaries: only claim.py knows SQL and calls the outbox's statements
(``status_api.storage.outbox_claims``, ``outbox_admin``); the other modules use the contract's types
(``status_api.storage.outbox``); backoff.py is pure. (What the relay may import
from the other packages is tests/test_layering.py.)"""

from __future__ import annotations

import ast
from pathlib import Path

RELAY = Path(__file__).resolve().parents[2] / "relay"
#: The modules holding the outbox's SQL: the relay's claims and the operators' queries.
STATEMENTS = ("status_api.storage.outbox_claims", "status_api.storage.outbox_admin")


def imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names.update(f"{node.module}.{a.name}" for a in node.names)
    return names


def test_only_claim_py_talks_sql_and_backoff_is_pure() -> None:
    for path in RELAY.glob("*.py"):
        roots = {n.split(".")[0] for n in imports(path)}
        if path.name not in ("claim.py",):
            assert "sqlalchemy" not in roots, f"{path.name} imports sqlalchemy"
            statements = {n for n in imports(path) if n.startswith(STATEMENTS)}
            assert not statements, f"{path.name} imports {sorted(statements)}"
    assert {n.split(".")[0] for n in imports(RELAY / "backoff.py")} <= {"__future__", "random", "collections"}
