"""The sha256 a published array's manifest records: of its data bytes in C order, not of
the .npy header, so an array hashes the same however it was written. Shared by the graph
build and the embedding index; ``file_sha256`` for a published file recorded whole (the
grounding index's surface table)."""

from __future__ import annotations

import hashlib
from typing import BinaryIO

import numpy as np

from kg_platform.storage.mapped import release

# chunks bound the memory a memory-mapped array pulls in at once
_STEP = 1 << 26


def array_sha256(array: np.ndarray, drop_behind: bool = False) -> str:
    """sha256 of the array's data bytes in C order (not of the .npy header); with
    ``drop_behind``, a memory-mapped array's pages leave this process's memory as soon as
    they are hashed (``mapped.release``), so hashing it holds one chunk of it, not all."""
    digest = hashlib.sha256()
    flat = np.ascontiguousarray(array).reshape(-1).view(np.uint8)
    for start in range(0, flat.size, _STEP):
        digest.update(flat[start : start + _STEP])
        if drop_behind:
            release(flat, start, start + _STEP)
    return digest.hexdigest()


def file_sha256(f: BinaryIO) -> str:
    """sha256 of every byte read from the open binary file ``f``."""
    digest = hashlib.sha256()
    while chunk := f.read(1 << 22):
        digest.update(chunk)
    return digest.hexdigest()
