"""``python -m flowrl``: the ``flowrl`` command line."""

import sys

from flowrl.apps.cli import console_main

if __name__ == "__main__":
    sys.exit(console_main())
