"""The verdict every evaluation check returns (posterior caches, trained models, reports)."""

from __future__ import annotations

from typing import NamedTuple


class CacheCheck(NamedTuple):
    """One check's verdict: its name, whether it passed, and what it found."""

    name: str
    passed: bool
    details: str
