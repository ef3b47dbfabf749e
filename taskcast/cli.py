"""``taskcast`` console script: dispatches to each service's own CLI."""

from __future__ import annotations

import sys

USAGE = "usage: taskcast {up,demo,gateway,status-api,relay} [options]  (taskcast <command> --help)"


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help"):
        print(USAGE)
        return 0 if args else 2
    command, rest = args[0], args[1:]
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
    if command == "demo":
        from taskcast.demo import main as demo_main

        return demo_main(rest)
    print(f"taskcast: unknown command {command!r}\n{USAGE}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
