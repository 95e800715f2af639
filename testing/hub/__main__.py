"""``python -m testing.hub ROOT [--host H] [--port N] [--token T] [--bytes-per-second B]``."""

import sys

from testing.hub import main

sys.exit(main())
