"""taskcast/dev/supervisor.py on real short-lived children (``true``, ``sleep``), its clock
driven by hand through ``check(now)``: an exit is restarted once the backoff is over, the backoff
doubles while the child keeps dying young and resets once it stayed up, a paused name is left
alone, and every restart is counted and reported."""

from __future__ import annotations

from pathlib import Path

from taskcast.dev.procs import Proc
from taskcast.dev.supervisor import Supervisor


def _proc(tmp_path: Path, name: str, *argv: str) -> Proc:
    return Proc(name, list(argv), None, tmp_path / f"{name}.log").start()


def test_an_exited_child_is_restarted_after_its_backoff_which_doubles_while_it_dies_young(
    tmp_path: Path,
) -> None:
    dying = _proc(tmp_path, "dying", "true")
    dying.wait(10)
    seen: list[tuple[str, int | None]] = []
    sup = Supervisor({"dying": dying}, backoff=1.0, max_backoff=4.0, stable_after=10.0,
                     on_restart=lambda p, code: seen.append((p.name, code)))  # fmt: skip
    assert sup.check(now=100.0) == []  # first sight: its start counts from now, backoff 1 s
    assert sup.check(now=100.5) == []
    assert sup.check(now=101.0) == ["dying"] and seen == [("dying", 0)]
    dying.wait(10)
    assert sup.check(now=102.0) == []  # died young: backoff 2 s now
    assert sup.check(now=103.0) == ["dying"]
    dying.wait(10)
    assert sup.check(now=106.9) == []  # 4 s
    assert sup.check(now=107.0) == ["dying"]
    dying.wait(10)
    assert sup.check(now=111.0) == ["dying"]  # capped at max_backoff
    dying.wait(10)
    assert sup.restarts == {"dying": 4}


def test_a_child_that_stayed_up_gets_the_short_backoff_again(tmp_path: Path) -> None:
    child = _proc(tmp_path, "steady", "sleep", "30")
    sup = Supervisor({"steady": child}, backoff=1.0, stable_after=5.0)
    try:
        sup.check(now=0.0)
        assert sup.check(now=6.0) == []  # running and stable
        child.kill()
        assert sup.check(now=7.0) == ["steady"]  # 7 s after its start: past the 1 s backoff
    finally:
        child.kill()


def test_a_paused_child_stays_down_until_resumed(tmp_path: Path) -> None:
    child = _proc(tmp_path, "paused", "true")
    child.wait(10)
    sup = Supervisor({"paused": child}, backoff=0.0)
    sup.pause(["paused"])
    assert sup.check(now=10.0) == []
    sup.resume(["paused"])
    assert sup.check(now=20.0) == ["paused"]
    child.wait(10)
