from __future__ import annotations

from pathlib import Path

import numpy as np

from kg_platform.storage.mapped import load_npy, release


def _resident_kib(path: Path) -> int:
    """The resident KiB of this process's mappings of ``path`` (/proc/self/smaps)."""
    total, inside = 0, False
    for line in Path("/proc/self/smaps").read_text().splitlines():
        fields = line.split()
        if "-" in fields[0] and ":" not in fields[0]:  # a mapping's header line
            inside = fields[-1] == str(path)
        elif inside and fields[0] == "Rss:":
            total += int(fields[1])
    return total


def test_release_drops_a_mapped_arrays_pages_and_keeps_its_data(tmp_path: Path) -> None:
    path = tmp_path / "values.npy"
    np.save(path, np.arange(1 << 20, dtype=np.int64))  # 8 MiB
    values = load_npy(str(path))
    assert int(values.sum()) == (1 << 20) * ((1 << 20) - 1) // 2
    assert _resident_kib(path) >= 8 * 1024
    release(values, 0, 1 << 19)  # the first half (and the page it shares with the header)
    # what stays is at most the second half; at least that half less the 2 MiB huge page
    # the range reaches into, which a kernel that maps the file's large folios whole drops
    assert 2 * 1024 <= _resident_kib(path) <= 4 * 1024 + 4
    release(values)
    assert _resident_kib(path) == 0
    # read again from the page cache, the same values
    assert int(values[-1]) == (1 << 20) - 1
    assert int(values.sum()) == (1 << 20) * ((1 << 20) - 1) // 2
    assert _resident_kib(path) >= 8 * 1024


def test_release_leaves_an_array_in_memory_alone() -> None:
    # anonymous memory dropped would read back as zeros: release must not touch it
    values = np.arange(1 << 16, dtype=np.int64)
    release(values)
    release(values[10:], 0, 100)
    assert int(values.sum()) == (1 << 16) * ((1 << 16) - 1) // 2
