"""Test-only relay entry point: the real relay process with a crash point armed.

``python -m tests.relay.crashing_relay --crash-at POINT:N --config FILE`` runs exactly what
``taskcast relay run --config FILE`` runs (:func:`relay.cli.run`), with a ``crash_hook`` that
SIGKILLs this process the N-th time the relay reaches POINT (one of
:data:`relay.relay.CRASH_POINTS`). The hook lives here, so production code reads no test switch.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys
from collections.abc import Callable

from relay.cli import configure, loop_factory, run
from relay.relay import CRASH_POINTS


def crash_hook(spec: str) -> Callable[[str], None]:
    """``POINT:N`` -> a hook that SIGKILLs this process the N-th time ``POINT`` is reached.

    Raises:
        ValueError: an unknown point or a count below 1.
    """
    point, _, count = spec.partition(":")
    if point not in CRASH_POINTS:
        raise ValueError(f"crash point must be one of {', '.join(CRASH_POINTS)}")
    target = int(count or "1")
    if target < 1:
        raise ValueError("crash count must be >= 1")
    seen = 0

    def hook(at: str) -> None:
        nonlocal seen
        if at == point:
            seen += 1
            if seen >= target:
                os.kill(os.getpid(), signal.SIGKILL)

    return hook


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="crashing_relay")
    p.add_argument("--crash-at", required=True, help="POINT:N")
    p.add_argument("--config", required=True)
    args = p.parse_args(argv)
    hook = crash_hook(args.crash_at)
    cfg = configure(args.config)
    with asyncio.Runner(loop_factory=loop_factory(cfg)) as runner:  # the loop `relay run` runs on
        return runner.run(run(cfg, crash_hook=hook))


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
