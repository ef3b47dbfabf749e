"""``taskcast`` console script: dispatches to each service's own CLI, and to Centrifugo's helper
commands (``taskcast/centrifugo_cli.py``: ``gentoken``, ``checkconfig``, ...)."""

from __future__ import annotations

import sys

SERVICES = {
    "up": "Run the whole pipeline in one process (gateway, Status API, relay) on embedded defaults",
    "demo": "Drive the demo task scenarios through the Status API",
    "gateway": "Run the realtime gateway (Centrifugo v6 config)",
    "status-api": "Run the Status API (serve, init-db, ...)",
    "relay": "Run the outbox relay",
    "token": "Mint a local development JWT for a Status API role (coordinator, admin, user, ...)",
    "trace": "Where one event went: eventId -> version -> outbox rows -> publication in its channel",
}
"""Service subcommands -> one-line descriptions (the helpers' are in centrifugo_cli.HELP)."""


def usage() -> str:
    """``taskcast --help``: one line per subcommand."""
    from taskcast.centrifugo_cli import HELP

    commands = {**SERVICES, **HELP}
    width = max(len(name) for name in commands)
    lines = [
        "usage: taskcast <command> [options]   (taskcast <command> --help for its options)",
        "",
        "commands:",
    ]
    lines += [f"  {name.ljust(width)}  {text}" for name, text in commands.items()]
    lines += [
        "",
        "options:",
        f"  {'-h, --help'.ljust(width)}  show this help",
        f"  {'--version'.ljust(width)}  show the version",
    ]
    return "\n".join(lines)


USAGE = "usage: taskcast <command> [options]   (taskcast --help lists the commands)"


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help"):
        if args:
            print(usage())
            return 0
        print(usage(), file=sys.stderr)
        return 2
    command, rest = args[0], args[1:]
    if command in ("--version", "-v"):
        from taskcast.centrifugo_cli import version_text

        print(version_text())
        return 0
    # Services first: a relay or Status API process never loads the gateway's config schema and
    # node, which the Centrifugo helper commands import (0.4 CPU-s per process start).
    if command == "gateway":
        from gateway.cli import main as gateway_main

        return gateway_main(rest)
    if command == "status-api":
        from status_api.cli import main as status_api_main  # type: ignore[import-not-found,unused-ignore]

        return int(status_api_main(rest))
    if command == "relay":
        from relay.cli import main as relay_main

        return relay_main(rest)
    if command == "up":
        from taskcast.up import main as up_main

        return up_main(rest)
    if command == "token":
        from taskcast.token import main as token_main

        return token_main(rest)
    if command == "trace":
        from taskcast.trace import main as trace_main

        return trace_main(rest)
    if command == "demo":
        from taskcast.demo import main as demo_main

        return demo_main(rest)
    from taskcast.centrifugo_cli import HELP

    if command in HELP:
        from taskcast.centrifugo_cli import main as helper_main

        return helper_main(command, rest)
    print(f"taskcast: unknown command {command!r}\n{USAGE}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
