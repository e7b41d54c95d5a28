"""The ``memrev`` command line (``memrev = memrev.cli:main``)."""

from .commands import main

__all__ = ["main"]
