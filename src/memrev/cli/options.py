"""Options and values several commands share: ``--json``, ``--author``, the
dates of ``--since``/``--until``, ``gc --keep-days``."""

from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone

import click

json_option = click.option("--json", "as_json", is_flag=True, help="Machine-readable output (JSON).")


_DAYS_AGO = re.compile(r"(\d+)[ .]days?[ .]ago")


def when(value: str | None) -> datetime | None:
    """``--since``/``--until``: an ISO 8601 date or time (UTC unless it says otherwise),
    or, as git takes them, ``now``, ``today``, ``yesterday``, ``N days ago`` (UTC days)."""
    if value is None:
        return None
    words = value.strip().lower()
    now = datetime.now(timezone.utc)
    midnight = now.replace(hour=0, minute=0, second=0, microsecond=0)
    if words == "now":
        return now
    if words == "today":
        return midnight
    if words == "yesterday":
        return midnight - timedelta(days=1)
    ago = _DAYS_AGO.fullmatch(words)
    if ago:
        return now - timedelta(days=int(ago.group(1)))
    try:
        return datetime.fromisoformat(value)
    except ValueError:
        raise click.BadParameter(f"{value!r} is not an ISO 8601 date or time (e.g. 2026-11-30 or 2026-11-30T14:00), "
                               "today, yesterday or N days ago") from None


def days(ctx: click.Context, param: click.Parameter, value: float) -> float:
    """``gc --keep-days``: 0 or more (``inf`` keeps deleted branches for ever); NaN and negatives mean nothing."""
    if not value >= 0:  # NaN too
        raise click.BadParameter(f"{value!r} is not a number of days, 0 or more")
    return value


def _default_author() -> str:
    """Who a commit made from the shell is by: ``$MEMREV_AUTHOR`` (click reads it), else the user's login name."""
    import getpass

    try:
        return getpass.getuser()
    except (KeyError, OSError):  # no login name (a container's uid without a passwd entry)
        return "memrev"


author_option = click.option(
    "--author", envvar="MEMREV_AUTHOR", default=_default_author,
    help="Author of the new commit (default: $MEMREV_AUTHOR, else your login name).",
)
