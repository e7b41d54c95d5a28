"""How a write waits out a lock another writer holds: a few tries, each waiting
twice as long as the one before (5 ms, 10 ms, ... 0.64 s: about 1.3 s in all)."""

ATTEMPTS = 8


def backoff_delay(attempt: int) -> float:
    """Seconds to wait after failed try number ``attempt`` (0 for the first)."""
    return 0.005 * 2**attempt
