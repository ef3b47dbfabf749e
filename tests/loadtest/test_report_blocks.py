"""The benchmarks' one writer of docs/PERFORMANCE.md blocks (loadtest/fleet.py ``replace_block``):
a run replaces only its own marked block and keeps everything else; a missing block is appended."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "loadtest"))

from fleet import replace_block, write_section  # noqa: E402

S, E = "<!-- x:start -->", "<!-- x:end -->"


def test_a_block_is_replaced_in_place_and_the_rest_kept(tmp_path: Path) -> None:
    out = tmp_path / "perf.md"
    out.write_text(f"# P\n\nbefore\n{S}\nold\n{E}\nafter\n<!-- y:start -->\nmine\n<!-- y:end -->\n")
    replace_block(out, S, E, f"{S}\nnew\n{E}")
    assert out.read_text() == f"# P\n\nbefore\n{S}\nnew\n{E}\nafter\n<!-- y:start -->\nmine\n<!-- y:end -->\n"


def test_a_missing_block_or_file_is_appended(tmp_path: Path) -> None:
    out = tmp_path / "perf.md"
    replace_block(out, S, E, f"{S}\none\n{E}")
    assert out.read_text() == f"# Performance\n\n{S}\none\n{E}\n"
    write_section(out, "z", "two\n")
    assert out.read_text().endswith(f"{E}\n\n<!-- z:start -->\ntwo\n<!-- z:end -->\n")
