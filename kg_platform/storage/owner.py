"""Which process wrote a staging folder or a temporary file: its pid and start time, carried
in the name, so the next build can tell what a killed process left behind from what a live
one is still writing (a pid alone may have been given to a later process). A stage in an S3
lake also names its host (``@host@``): a pid is judged only on the machine that ran it."""

from __future__ import annotations

import os
import re
import socket

from kg_platform.settings.local import process_started_at

# "~<pid>.<start in 1/100 s since the epoch>~" inside a name
OWNER_PATTERN = re.compile(r"~(\d+)\.(\d+)~")
# "@<host name>@" inside a name: the machine the owner ran on
HOST_PATTERN = re.compile(r"@([A-Za-z0-9.\-]+)@")


_TAGS: dict[int, str] = {}


def owner_tag(pid: int | None = None) -> str:
    """The tag naming process ``pid`` (default: this one) inside a file or folder name."""
    pid = os.getpid() if pid is None else pid
    if pid not in _TAGS:  # a forked child has a pid of its own, so its own entry
        _TAGS[pid] = f"~{pid}.{round((process_started_at(pid) or 0.0) * 100)}~"
    return _TAGS[pid]


def owner_of(name: str) -> tuple[int, float] | None:
    """(pid, start time) of the process a name's tag names; None for a name without one."""
    match = OWNER_PATTERN.search(name)
    return (int(match.group(1)), int(match.group(2)) / 100) if match else None


def host_name() -> str:
    """This machine's name as a name part: letters, digits, '.' and '-' only."""
    return re.sub(r"[^A-Za-z0-9.\-]", "-", socket.gethostname()) or "localhost"


def host_tag() -> str:
    """The tag naming this machine inside a staging name (see HOST_PATTERN)."""
    return f"@{host_name()}@"


def host_of(name: str) -> str | None:
    """The host a name's host tag names; None for a name without one."""
    match = HOST_PATTERN.search(name)
    return match.group(1) if match else None
