"""One writer per Dagster instance: `kg build` holds `<dagster_home>/build.lock` while it
writes the instance (partitions, backfills, `.kg/` files) and the lake.

The file names its holder (pid and start time) for the one line a second build prints. The
lock itself is the kernel's (`flock`): it goes with the holder's process, so a killed build
leaves a stale file that the next build simply takes over, and two builds never both hold it.
"""

from __future__ import annotations

import fcntl
import json
import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from kg_platform.settings.workers import process_alive
from kg_platform.storage.owner import process_started_at

LOCK_FILE = "build.lock"


@dataclass(frozen=True)
class Holder:
    """The build that holds (or held) the lock."""

    pid: int
    started_at: float  # the holder process's start, seconds since the epoch

    def describe(self) -> str:
        when = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(self.started_at))
        return f"pid {self.pid}, started at {when}"

    def alive(self) -> bool:
        return process_alive(self.pid, self.started_at)


class BuildLockHeld(ValueError):
    """Another build holds the instance; the message is the one line the user sees."""

    def __init__(self, lock: Path, holder: Holder | None) -> None:
        who = holder.describe() if holder else "its pid not written yet"
        super().__init__(
            f"another kg build is running on this instance ({who}; lock {lock}); "
            "wait for it, or add --wait"
        )
        self.holder = holder


def read_holder(path: Path) -> Holder | None:
    """The holder the lock file names; None when it names none (empty or being written)."""
    try:
        raw = json.loads(path.read_text())
        return Holder(int(raw["pid"]), float(raw["started_at"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _held_by_other(path: Path, tries: int = 20) -> Holder | None:
    # the holder writes its name just after taking the lock: give it a moment to appear
    for _ in range(tries):
        holder = read_holder(path)
        if holder is not None:
            return holder
        time.sleep(0.05)
    return None


@contextmanager
def build_lock(
    dagster_home: Path, wait: bool = False, on_wait: Callable[[str], None] = print
) -> Iterator[Holder]:
    """Hold the instance's build lock for the block. When another live build holds it:
    raise BuildLockHeld (one line naming it), or with ``wait`` say so once and wait for it."""
    path = dagster_home / LOCK_FILE
    created = not dagster_home.exists()
    fd = _take(path, wait, on_wait)
    try:
        me = Holder(os.getpid(), process_started_at(os.getpid()) or time.time())
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps({"pid": me.pid, "started_at": me.started_at}).encode(), 0)
        os.fsync(fd)
        yield me
    finally:
        # a build refused before it wrote anything leaves no instance folder behind
        if created and os.listdir(dagster_home) == [LOCK_FILE]:
            path.unlink()
            dagster_home.rmdir()
        os.close(fd)  # releases the lock; the file stays, naming the last holder


def _take(path: Path, wait: bool, on_wait: Callable[[str], None]) -> int:
    """An open descriptor of ``path`` holding its lock."""

    def busy(fd: int) -> None:
        holder = _held_by_other(path)
        if not wait:
            os.close(fd)
            raise BuildLockHeld(path, holder) from None
        who = holder.describe() if holder else "pid unknown"
        on_wait(f"waiting for the kg build running on this instance ({who})")
        fcntl.flock(fd, fcntl.LOCK_EX)

    return _locked(path, busy, make_folder=True)


def _locked(path: Path, busy: Callable[[int], None], make_folder: bool = False) -> int:
    """An open descriptor of ``path`` holding its lock; ``busy(fd)``, when another process
    holds it, either raises (closing ``fd``) or blocks until the lock is this one's."""
    while True:
        if make_folder:
            path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            busy(fd)
        try:
            same = os.fstat(fd).st_ino == os.stat(path).st_ino
        except FileNotFoundError:
            same = False
        if same:
            return fd
        os.close(fd)  # the holder removed the file it locked: lock the one there now


# -- one writer per lake ----------------------------------------------------------------------
# at the lake's root while a build writes it: which home (instance) writes, from which
# process and machine; removed when the build ends (a killed build's record is taken over)
WRITER_FILE = ".kg-writer.json"
# a writer on another machine renews its record this often; older than LEASE_S, it is gone
LEASE_S = 120.0


@dataclass(frozen=True)
class LakeWriter:
    home: str  # the writer's instance (its DAGSTER_HOME)
    host: str
    pid: int
    started_at: float
    renewed_at: float

    def describe(self) -> str:
        when = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(self.started_at))
        return f"home {self.home}, pid {self.pid} on {self.host}, started at {when}"

    def alive(self) -> bool:
        from kg_platform.storage.owner import host_name

        if self.host == host_name():
            return process_alive(self.pid, self.started_at)
        return time.time() - self.renewed_at < LEASE_S


class LakeHeld(ValueError):
    """A build of another home writes the lake; the message is the line the user sees."""

    def __init__(self, lake_root: str, writer: LakeWriter) -> None:
        super().__init__(
            f"lake {lake_root} is being written by a kg build of another home "
            f"({writer.describe()}); one lake has one writer: wait for it, or build "
            "into another --lake"
        )
        self.writer = writer


def read_writer(lake) -> LakeWriter | None:
    try:
        raw = json.loads(lake.read_bytes(WRITER_FILE))
        return LakeWriter(
            str(raw["home"]),
            str(raw["host"]),
            int(raw["pid"]),
            float(raw["started_at"]),
            float(raw["renewed_at"]),
        )
    except (OSError, ValueError, KeyError, TypeError):
        return None


@contextmanager
def lake_writer(lake_root: str, dagster_home: Path) -> Iterator[LakeWriter]:
    """Hold ``lake_root`` for the build of ``dagster_home`` for the block: raise LakeHeld
    (one line naming the home that writes it) while a live build of another home does. A
    local lake is held by the kernel (`flock` on the record, released with the process); an
    S3 lake by the record, renewed every LEASE_S / 4 while held."""
    import threading

    from kg_platform.storage.lake import Lake
    from kg_platform.storage.owner import host_name

    lake = Lake(lake_root)
    pid = os.getpid()
    me = LakeWriter(
        str(dagster_home), host_name(), pid, process_started_at(pid) or time.time(), time.time()
    )
    fd = None
    if lake.is_local:
        os.makedirs(lake.root, exist_ok=True)
        fd = _take_writer(lake, Path(lake.root) / WRITER_FILE)
    else:
        writer = read_writer(lake)
        if writer is not None and writer.home != me.home and writer.alive():
            raise LakeHeld(lake.root, writer)
    stop = threading.Event()

    def record(who: LakeWriter) -> None:
        data = json.dumps(who.__dict__).encode()
        if fd is not None:
            os.ftruncate(fd, 0)
            os.pwrite(fd, data, 0)
        else:
            lake.write_bytes(WRITER_FILE, data)

    def renew() -> None:
        while not stop.wait(LEASE_S / 4):
            record(LakeWriter(me.home, me.host, me.pid, me.started_at, time.time()))

    record(me)
    renewer = None if fd is not None else threading.Thread(target=renew, daemon=True)
    if renewer is not None:
        renewer.start()
    try:
        yield me
    finally:
        stop.set()
        if renewer is not None:
            renewer.join()
        try:
            found = read_writer(lake)
            if fd is not None or (found and (found.home, found.pid) == (me.home, me.pid)):
                lake.remove(WRITER_FILE)
        finally:
            if fd is not None:
                os.close(fd)


def _take_writer(lake, path: Path) -> int:
    """An open descriptor of the local lake's writer record, holding its lock."""

    def busy(fd: int) -> None:
        os.close(fd)
        writer = None
        for _ in range(20):  # the holder writes its record just after taking the lock
            writer = read_writer(lake)
            if writer is not None:
                break
            time.sleep(0.05)
        raise LakeHeld(lake.root, writer or LakeWriter("unknown", "?", 0, 0.0, 0.0)) from None

    return _locked(path, busy)
