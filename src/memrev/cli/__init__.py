"""The ``memrev`` command line (``memrev = memrev.cli:main``).

``app.py`` holds the command group (global options, opening the store, errors
as exit status 1), ``options.py`` the options several commands share,
``render.py`` how output is printed (terminal-safe text, JSON, the pager, the
commit graph and log formats, diffs). The commands, by area: ``history.py``
(log, show, diff, history, blame, why), ``files.py`` (cat, ls, adopt,
import-dir), ``refs.py`` (branch, tag, merge, revert, restore),
``maintenance.py`` (fsck, gc, export, import), ``serve.py`` (serve), ``mcp.py``
(mcp). Each command module adds its commands to ``main`` when it is imported,
here.

Start time matters (``memrev --help`` should answer in a blink): these
modules import only click and memrev's errors at the top. The store (and
with it asyncio, SQLite, the history modules) is imported when a command
opens one, the viewer only by ``serve``; AutoGen and ag2 never. The
read-only commands (``log``, ``show``, ``diff``, ``history``, ``cat``, ``ls``) open a
``memrev.store.reads.Reader``: no asyncio, no async ``Store`` (issue 26).
"""

from . import files, history, maintenance, mcp, refs, serve  # noqa: F401  (each adds its commands to main)
from .app import main

__all__ = ["main"]
