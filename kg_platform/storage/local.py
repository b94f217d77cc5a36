"""The platform's home folder on this machine (`.kg`, or KG_HOME) and the small text files
written there whole (sources.json, the workers' state, the instance's dagster.yaml)."""

from __future__ import annotations

import os
from pathlib import Path


def kg_home() -> Path:
    return Path(os.environ.get("KG_HOME", ".kg")).absolute()


def write_text_atomically(path: Path, text: str) -> None:
    """``path`` holds ``text`` whole or keeps what it held: written under a temporary name of
    its own (two writers never share one) in the same folder, then renamed over it."""
    import tempfile

    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.tmp-")
    try:
        os.fchmod(fd, 0o644)  # mkstemp's 0600 would hide the file from a UI run as another user
        with os.fdopen(fd, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
