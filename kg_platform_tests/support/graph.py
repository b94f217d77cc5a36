"""What the graph tests share: rewriting one array of a built graph, as bit rot or as a build bug."""

from __future__ import annotations

import json

import numpy as np

from kg_platform.graph import layout
from kg_platform.graph.build import array_sha256
from kg_platform.storage.lake import Lake


def tamper(lake: Lake, build_id: str, name: str, change, fix_manifest: bool) -> None:
    """Rewrite one array; with fix_manifest the manifest agrees (a build bug, not bit rot)."""
    array = np.array(lake.read_npy(layout.array_key(build_id, name), mmap=False))
    change(array)
    lake.write_npy(layout.array_key(build_id, name), array)
    if fix_manifest:
        key = layout.manifest_key(build_id)
        manifest = json.loads(lake.read_bytes(key))
        manifest["arrays"][name]["sha256"] = array_sha256(array)
        lake.write_bytes(key, json.dumps(manifest).encode())
