"""``python -m relay …``: the same as ``taskcast relay …``."""

import sys

from relay.cli import main

raise SystemExit(main(sys.argv[1:]))
