"""The platform's home folder on this machine (`.kg`, or KG_HOME), the small text files
written there whole (sources.json, the workers' state, the instance's dagster.yaml) and when
a process of this machine started (the workers' state and the storage's owner tags)."""

from __future__ import annotations

import os
from pathlib import Path

HOME_NAME = ".kg"
# the checkout this package runs from, when installed editable (`make venv`): the `.kg` that
# `make demo` builds there is found from any folder
CHECKOUT = Path(__file__).resolve().parents[2]


def kg_home() -> Path:
    """KG_HOME when set; else the nearest `.kg` folder in the current folder or one of its
    parents (as git finds `.git`); else the checkout's own `.kg` when it has one (`make demo`
    builds it); else `.kg` in the current folder (where a first `kg build` writes)."""
    if "KG_HOME" in os.environ:
        return Path(os.environ["KG_HOME"]).absolute()
    here = Path.cwd()
    for folder in (here, *here.parents):
        if (folder / HOME_NAME).is_dir():
            return folder / HOME_NAME
    if (CHECKOUT / HOME_NAME).is_dir():
        return CHECKOUT / HOME_NAME
    return here / HOME_NAME


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


def process_started_at(pid: int) -> float | None:
    """When process ``pid`` started (seconds since the epoch), from /proc; None where that
    cannot be read (no such process, or no /proc)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        boot = next(
            float(line.split()[1])
            for line in Path("/proc/stat").read_text().splitlines()
            if line.startswith("btime ")
        )
    except (OSError, StopIteration, ValueError):
        return None
    ticks = int(stat.rsplit(")", 1)[-1].split()[19])
    return boot + ticks / os.sysconf("SC_CLK_TCK")
