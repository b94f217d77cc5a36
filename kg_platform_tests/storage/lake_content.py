"""What a lake holds, as comparable values: the tests that build the same sources two ways
(a local folder and S3, in process and on Celery workers) compare these."""

from __future__ import annotations

import hashlib
import json

import numpy as np
import polars as pl

from kg_platform.storage.lake import Lake


def lake_keys(lake: Lake) -> list[str]:
    """Every object key under the lake root, sorted (``raw/`` aside)."""
    root = lake.root if lake.is_local else lake.root.split("://", 1)[1]
    found = [p[len(root) + 1 :] for p in lake.fs.find(root)]
    return sorted(k for k in found if not k.startswith("raw/"))


def content(lake: Lake) -> dict[str, str]:
    """sha256 of each Parquet table's rows (sorted, so row-group layout does not count) and
    of each array's dtype, shape and bytes, keyed by lake key, with each published graph
    build's id (a hash of input modification stamps) replaced by ``<build>``."""
    keys = lake_keys(lake)
    build_ids = [
        json.loads(lake.read_bytes(k))["build_id"]
        for k in keys
        if k.startswith("graph/") and k.endswith("/current.json")
    ]
    hashes = {}
    for key in keys:
        name = key
        for build_id in build_ids:
            name = name.replace(f"/{build_id}/", "/<build>/")
        if key.endswith(".parquet"):
            frame = pl.from_arrow(lake.read_parquet(key))
            rows = frame.sort(frame.columns).write_ipc(None).getvalue()
            hashes[name] = hashlib.sha256(rows).hexdigest()
        elif key.endswith(".npy"):
            array = np.ascontiguousarray(lake.read_npy(key, mmap=False))
            digest = hashlib.sha256(f"{array.dtype}{array.shape}".encode() + array.tobytes())
            hashes[name] = digest.hexdigest()
    return hashes
