"""How many threads a graph phase runs on: the cores this process may use."""

from __future__ import annotations

import os


def workers() -> int:
    """The cores this process may run on: its CPU affinity, not the machine's count, so a
    process pinned to one core (``taskset -c 0``) runs its passes one after another."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)
