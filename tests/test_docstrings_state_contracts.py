"""Product code states contracts, not history: no docstring or comment of a product package cites
an issue or a defect by number ("issue 16", "defect 5"). Why a rule exists belongs in the
contract it states; when it came belongs in git."""

from __future__ import annotations

import re
import tokenize
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("gateway", "status_api", "relay", "taskcast", "httpwire", "sdk/python/taskcast_worker")
HISTORY = re.compile(r"\b(?:issue|defect)s? #?\d+", re.IGNORECASE)


def history_citations(source: str) -> list[tuple[int, str]]:
    """(line, text) of every docstring or comment in ``source`` that cites an issue or defect."""
    found = []
    lines = iter(source.splitlines(keepends=True))
    for tok in tokenize.generate_tokens(lambda: next(lines, "")):
        if tok.type in (tokenize.COMMENT, tokenize.STRING) and HISTORY.search(tok.string):
            found.append((tok.start[0], HISTORY.search(tok.string).group(0)))  # type: ignore[union-attr]
    return found


def test_the_check_sees_a_citation_in_a_docstring_and_a_comment() -> None:
    source = '"""Bounded (issue 16)."""\nx = 1  # see defect 5\ny = "issue 3 in a string is data too"\n'
    assert [line for line, _ in history_citations(source)] == [1, 2, 3]
    assert history_citations('"""Bounded; see docs/relay.md."""\n') == []


def test_no_product_module_cites_an_issue_or_a_defect() -> None:
    offenders = [
        f"{path.relative_to(ROOT)}:{line}: {text}"
        for package in PACKAGES
        for path in sorted((ROOT / package).rglob("*.py"))
        if "_pb2" not in path.name
        for line, text in history_citations(path.read_text(encoding="utf-8"))
    ]
    assert offenders == [], "history in product code (state the contract instead):\n" + "\n".join(offenders)
