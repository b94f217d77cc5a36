"""What the tests of kg build as a process share: the selection they build, a bound on how long
they wait, and the environment of a child kg on a home."""

from __future__ import annotations

import os
from pathlib import Path

# the checkout (kg_platform_tests/support/build.py -> two folders up)
REPO_ROOT = Path(__file__).resolve().parents[2]
SELECT = "key:pubmed_xml or key:pubmed_tables or key:corpus"
# a bound on a test that waits for real builds, not a figure the test asserts
BUILD_TIMEOUT_S = 600


def kg_env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KG_", "DAGSTER_"))}
    env["KG_HOME"] = str(home)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO_ROOT), env.get("PYTHONPATH")) if p)
    return env
