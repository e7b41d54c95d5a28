"""``python -m memrev.cli``: the same command as ``memrev``."""

import sys

from . import main

sys.exit(main())
