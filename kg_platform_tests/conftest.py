"""Shared fixtures. Reference data is read in place from KG_REFERENCE_DATA (default
../shared/data beside the repository); tests that need it skip when it is absent and fail
under CI=true, so CI can never pass by skipping."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]


def reference_data_dir() -> Path:
    return Path(os.environ.get("KG_REFERENCE_DATA", REPO_ROOT.parent / "shared" / "data"))


def require_reference(*parts: str) -> Path:
    """Path under the reference data; skip (or fail under CI=true) when it is missing."""
    path = reference_data_dir().joinpath(*parts)
    if not path.exists():
        message = f"reference data not found: {path} (set KG_REFERENCE_DATA)"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(message)
        pytest.skip(message)
    return path


@pytest.fixture(scope="session")
def reference_data() -> Path:
    return require_reference()
