"""docs/architecture.md's module map is complete: every module of gateway/, status_api/, relay/
and taskcast/ appears in it, by its whole path or, in the row of a package (a first cell naming
a folder), by its file name (``__init__.py`` by its folder). A new module gets its row in the
same change."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("gateway", "status_api", "relay", "taskcast", "httpwire")
DOC = ROOT / "docs" / "architecture.md"


def _section(text: str) -> str:
    start = text.index("\n## Module map")
    end = text.find("\n## ", start + 1)
    section = text[start : end if end != -1 else len(text)]
    return re.sub(r"```.*?```", "", section, flags=re.S)  # drawings are not the map


def _names(cell: str) -> set[str]:
    return set(re.findall(r"`([^`]+)`", cell))


def missing_modules(doc: str, files: list[str]) -> list[str]:
    """The module paths (relative, posix) of ``files`` that the module map of ``doc`` leaves out."""
    section = _section(doc)
    everywhere = _names(section)
    rows = []
    for line in section.splitlines():
        cells = line.split("|")
        if line.startswith("|") and len(cells) >= 3:
            folders = {name for name in _names(cells[1]) if name.endswith("/")}
            rows.append((folders, _names("|".join(cells[1:]))))

    def covered(path: str) -> bool:
        if path in everywhere:
            return True
        parts = path.split("/")
        if len(parts) == 2 and parts[1] == "__init__.py":
            return True  # the package itself: its section's heading
        for folders, names in rows:
            for folder in folders:
                if not path.startswith(folder):
                    continue
                rest = path[len(folder) :].split("/")
                if rest[-1] == "__init__.py":
                    if len(rest) == 1 or f"{rest[-2]}/" in names:
                        return True
                elif rest[-1] in names:
                    return True
        return False

    return [path for path in files if not covered(path)]


def _product_modules() -> list[str]:
    return sorted(f.relative_to(ROOT).as_posix() for pkg in PACKAGES for f in (ROOT / pkg).rglob("*.py"))


def test_every_product_module_is_in_the_module_map():
    missing = missing_modules(DOC.read_text(), _product_modules())
    assert missing == [], f"docs/architecture.md's module map leaves out: {missing}"


def test_the_map_check_sees_a_missing_module():
    doc = (
        "# A\n\n## Module map\n\n| module | owns |\n|---|---|\n"
        "| `gateway/app.py` | root |\n| `gateway/api/` | `executor.py`, `grpc/` (`server.py`) |\n\n## Next\n"
        "`gateway/hub.py` is named outside the map.\n"
    )
    files = [
        "gateway/__init__.py",
        "gateway/app.py",
        "gateway/hub.py",
        "gateway/api/__init__.py",
        "gateway/api/executor.py",
        "gateway/api/batch.py",
        "gateway/api/grpc/__init__.py",
        "gateway/api/grpc/server.py",
    ]
    assert missing_modules(doc, files) == ["gateway/hub.py", "gateway/api/batch.py"]
