"""The one check contract of the platform, without Dagster.

Each domain declares the checks of an asset in a module the definitions load cheaply
(``CHECKS``-named tables: ``{name: (what it guards, blocking)}``, so ``grep -rn CHECKS
kg_platform`` lists every guard), and its check functions return one :class:`CheckOutcome`
per declared name. The assets turn outcomes into Dagster check results
(``kg_platform.assets.checks``); a failed blocking check stops publication.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

# {check name: (what it guards, as the UI shows it; whether a failure blocks)}
Checks = dict[str, tuple[str, bool]]


@dataclass(frozen=True)
class CheckOutcome:
    """One check's verdict: ``details`` in a line (shown as the check's ``details``),
    ``metadata`` the figures it judged (numbers, strings, lists or dicts)."""

    name: str
    passed: bool
    details: str = ""
    metadata: dict[str, Any] = field(default_factory=dict)
