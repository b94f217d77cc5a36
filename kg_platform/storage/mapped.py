"""How a process reads the files of a published build it serves, and whether any of them
changed under it.

A published build is immutable: written once, renamed into place, never rewritten. A file
truncated in place all the same (outside damage) makes every later read of a page past its
new end a SIGBUS, which no Python code can catch. So a serving process (`kg serve`) calls
``serve_policy``: from then on a file smaller than ``copy_below`` bytes is read into memory
when it is opened (damage on disk cannot reach the copy), a larger one is memory-mapped, and
each is kept open read-only beside its size at opening, so ``damage()`` can compare its
``fstat`` size now (a system call per file, a few microseconds in all) before each request:
a mapped file that shrank is named before anything reads it. Other processes (`kg ask`,
the build) map every file as before, and record nothing.
"""

from __future__ import annotations

import mmap
import os
import threading
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import BinaryIO

import numpy as np

_lock = threading.Lock()
_policy: dict[str, int | bool] = {"watch": False, "copy_below": 0}
_opened: dict[int, OpenedFile] = {}  # id -> file, while the object that read it lives
_next_id = 0


@dataclass(frozen=True)
class OpenedFile:
    path: str
    fd: int
    size: int
    copied: bool  # read into memory (damage on disk cannot reach it) or mapped

    def problem(self) -> str | None:
        """Why the file is not what was opened (None: the same size)."""
        try:
            size = os.fstat(self.fd).st_size
        except OSError as error:
            return f"{self.path}: cannot be checked ({error})"
        if size == self.size:
            return None
        return f"{self.path}: {size} bytes on disk, {self.size} when it was opened"


def serve_policy(copy_below: int) -> None:
    """Record every file opened from now on, and read those under ``copy_below`` bytes."""
    if copy_below < 0:
        raise ValueError(f"copy below {copy_below} bytes: must be 0 or more")
    _policy.update(watch=True, copy_below=copy_below)


def _record(path: str, f: BinaryIO, size: int, copied: bool, owner: object) -> None:
    global _next_id
    if not _policy["watch"]:
        return
    fd = os.dup(f.fileno())
    with _lock:
        _next_id += 1
        key = _next_id
        _opened[key] = OpenedFile(path, fd, size, copied)
    weakref.finalize(owner, _forget, key)


def _forget(key: int) -> None:
    with _lock:
        opened = _opened.pop(key, None)
    if opened is not None:
        os.close(opened.fd)


def _copies(size: int) -> bool:
    return bool(_policy["watch"]) and size < int(_policy["copy_below"])


def load_npy(path: str, owner: object | None = None) -> np.ndarray:
    """The ``.npy`` array at ``path``, read-only: memory-mapped, or read into memory under
    the serving policy when small; recorded for ``damage()`` while ``owner`` (default: the
    array itself) lives."""
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        copied = _copies(size)
        if copied:
            array = np.load(f, allow_pickle=False)
            array.flags.writeable = False
        else:
            array = np.load(path, mmap_mode="r", allow_pickle=False)
        _record(path, f, size, copied, array if owner is None else owner)
    return array


def map_file(f: BinaryIO, path: str) -> tuple[mmap.mmap | bytes, Callable[[object], None]]:
    """The whole of the open file ``f``, read-only: mapped, or read into memory under the
    serving policy when small; and the call that records it for ``damage()`` while the
    object given to it lives (made while ``f`` is open)."""
    size = os.fstat(f.fileno()).st_size
    copied = _copies(size)
    if copied:
        f.seek(0)
        data: mmap.mmap | bytes = f.read()
        if len(data) != size:
            raise OSError(f"{path}: read {len(data)} of {size} bytes")
    else:
        data = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    return data, lambda owner: _record(path, f, size, copied, owner)


def damage() -> tuple[list[str], list[str]]:
    """(mapped files that changed since they were opened: reading them may kill the
    process; copied files that changed on disk: their copies still serve), each named with
    its size then and now."""
    with _lock:
        opened = list(_opened.values())
    mapped, copied = [], []
    for file in opened:
        problem = file.problem()
        if problem is not None:
            (copied if file.copied else mapped).append(problem)
    return mapped, copied


def opened_files() -> list[OpenedFile]:
    with _lock:
        return list(_opened.values())


# how many bytes a scan that drops its pages behind it reads between two drops
WINDOW_BYTES = 1 << 26


def _file_map(array: np.ndarray) -> mmap.mmap | None:
    """The file mapping that holds ``array``'s data, if it is a view of one (``load_npy``'s
    mapped arrays and their slices); None for an array in memory."""
    base: object = array
    while base is not None:
        if isinstance(base, mmap.mmap):
            return base
        base = getattr(base, "base", None)
    return None


def release(array: np.ndarray, start: int = 0, stop: int | None = None) -> None:
    """Drop from this process's resident memory the pages of entries ``start`` to ``stop``
    (default: the end) of a memory-mapped, C-contiguous ``array``; the next read of them
    maps them again from the page cache or the file. Pages the range only shares are
    dropped too, and a kernel that maps the file's large folios whole may drop the whole of
    a huge page the range reaches into: they are clean pages of a read-only file, so
    dropping one costs a re-read and never its data. Nothing for an array in memory (a
    copied one under the serving policy, or any other), whose pages are its data."""
    mapping = _file_map(array)
    if mapping is None or not hasattr(mmap, "MADV_DONTNEED") or not array.size:
        return
    stop = array.shape[0] if stop is None else min(stop, array.shape[0])
    if stop <= start:
        return
    row = array.itemsize * (array.size // array.shape[0])
    origin = np.frombuffer(mapping, dtype=np.uint8).ctypes.data
    first = array.ctypes.data - origin + start * row
    last = array.ctypes.data - origin + stop * row
    page = mmap.PAGESIZE
    first -= first % page
    last = min(-(-last // page) * page, len(mapping))
    if last > first:
        mapping.madvise(mmap.MADV_DONTNEED, first, last - first)


def windows(size: int, itemsize: int) -> list[tuple[int, int]]:
    """Ranges of ``size`` entries of ``itemsize`` bytes, about ``WINDOW_BYTES`` each (read
    when called)."""
    step = max(1, WINDOW_BYTES // max(1, itemsize))
    return [(lo, min(lo + step, size)) for lo in range(0, size, step)]
