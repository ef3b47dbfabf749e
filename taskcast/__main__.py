"""``python -m taskcast ...`` is the ``taskcast`` console script."""

import sys

from taskcast.cli import main

sys.exit(main())
