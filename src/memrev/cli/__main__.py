"""``python -m memrev.cli``: the same command as ``memrev``."""

import sys

from .commands import main

sys.exit(main())
