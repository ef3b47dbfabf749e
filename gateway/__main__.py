"""``python -m gateway``: the same as ``taskcast gateway`` (gateway/cli.py)."""

from __future__ import annotations

import sys

from gateway.cli import main

sys.exit(main(sys.argv[1:]))
