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


ROOT = DOMAIN.parent
STATE_TABLES = {"task", "task_step", "task_event_log", "task_event_dedup"}


def _py(path: Path) -> list[Path]:
    return sorted(path.rglob("*.py"))


def _private_access(node: ast.AST) -> bool:
    if not (isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__")):
        return False
    return not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"))


def test_no_module_reaches_into_another_modules_private_names() -> None:
    """Issue 14: no cross-module private calls (``core._retrying``, ``config._build``)."""
    offenders = []
    for path in _py(ROOT):
        for node in ast.walk(ast.parse(path.read_text())):
            if _private_access(node):
                offenders.append(f"{path.relative_to(ROOT)}:{node.lineno} {ast.unparse(node)}")
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("status_api"):
                offenders += [
                    f"{path.relative_to(ROOT)}:{node.lineno} imports {a.name}"
                    for a in node.names
                    if a.name.startswith("_")
                ]
    assert offenders == []


def test_use_case_modules_share_only_the_context() -> None:
    """service/{tasks,ingest,admin,retention} build on service.context, never on each other."""
    offenders = []
    for path in _py(ROOT / "service"):
        if path.name in ("__init__.py", "context.py"):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            module = node.module or "" if isinstance(node, ast.ImportFrom) else ""
            if module.startswith("status_api.service") and module != "status_api.service.context":
                offenders.append(f"{path.name}: {module}")
    assert offenders == []


def test_state_tables_are_written_only_by_the_one_writer() -> None:
    """INSERT/UPDATE of task, task_step, task_event_log, task_event_dedup only in storage/write.py
    (a single event is a batch of one); the only DELETE is retention's prefix purge."""
    offenders = []
    for path in _py(ROOT):
        rel = str(path.relative_to(ROOT))
        for node in ast.walk(ast.parse(path.read_text())):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.args):
                continue
            target = node.args[0]
            if node.func.attr in ("insert", "update", "delete") and isinstance(target, ast.Name):
                if target.id not in STATE_TABLES:
                    continue
                allowed = rel == "storage/write.py" or (
                    rel == "storage/repository.py" and node.func.attr == "delete"
                )
                if not allowed:
                    offenders.append(f"{rel}:{node.lineno} {node.func.attr}({target.id})")
    assert offenders == []
