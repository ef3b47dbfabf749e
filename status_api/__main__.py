"""``python -m status_api serve|init-db --config FILE``."""

import sys

from status_api.cli import main

raise SystemExit(main(sys.argv[1:]))
