"""Consolidate verified shards into one PMID-sorted matrix, never holding it in memory.

Pass 1 verifies every shard against the corpus (PMIDs and model) and samples every
``stride``-th PMID of each accepted shard; the sorted sample cuts the PMID space into
blocks of about ``block_rows`` rows. Pass 2 fills memory-mapped outputs block by block:
each block gathers its slice from every shard (binary search on the shard's sorted PMIDs),
sorts it, asserts its PMIDs are unique, and writes it at its offset. Blocks are disjoint
PMID ranges, so uniqueness within blocks is uniqueness overall.

Output: ``embeddings/index/vectors.f16.npy`` (float16, n x dim), ``pmids.npy`` (int64,
ascending) and ``manifest.json`` written last. The manifest records each array's file size
and the sha256 of its data, as a graph build's does: every open compares the sizes (one
listing), the index's check and ``kg status --verify`` the hashes.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from dataclasses import dataclass

import numpy as np

from kg_platform.checks import CheckOutcome
from kg_platform.embeddings.shards import (
    SHARDS,
    pmids_key,
    quotable_pmids_by_file,
    vectors_key,
    verify_shard,
)
from kg_platform.storage.digest import array_sha256
from kg_platform.storage.embeddings import INDEX, INDEX_MANIFEST, INDEX_PMIDS, INDEX_VECTORS
from kg_platform.storage.lake import Lake

# manifest name -> key of each array the index publishes
INDEX_ARRAYS = {"pmids": INDEX_PMIDS, "vectors": INDEX_VECTORS}


class IndexBuildError(ValueError):
    """The shards cannot be consolidated (e.g. duplicate PMIDs); names what is wrong."""


@dataclass(frozen=True)
class IndexBuild:
    vectors: int
    dim: int
    quotable: int
    shards: int
    missing_files: tuple[str, ...]  # quotable records but no verified shard
    missing_reasons: dict[str, str]
    missing_vectors: int  # quotable records in those files
    seconds: float

    @property
    def gap(self) -> int:
        return self.quotable - self.vectors

    @property
    def gap_explained(self) -> bool:
        return self.gap == self.missing_vectors


def _verified_shards(
    lake: Lake, expected: dict[str, np.ndarray], fingerprint: str
) -> tuple[list[tuple[np.ndarray, np.ndarray]], dict[str, str], int]:
    """The non-empty shards of model ``fingerprint`` that verify (cheaply) for the files of
    ``expected`` as (pmids, vectors) memmaps; the files without one, with why; the dim."""
    accepted: list[tuple[np.ndarray, np.ndarray]] = []
    missing: dict[str, str] = {}
    dim = 0
    for file, pmids in expected.items():
        status = verify_shard(lake, file, pmids, fingerprint, deep=False)
        if not status.done:
            missing[file] = status.reason
            continue
        shard_pmids = lake.read_npy(pmids_key(file))
        shard_vectors = lake.read_npy(vectors_key(file))
        if len(shard_pmids) == 0:
            continue
        if dim and shard_vectors.shape[1] != dim:
            raise IndexBuildError(
                f"{vectors_key(file)}: dim {shard_vectors.shape[1]}, others {dim}"
            )
        dim = int(shard_vectors.shape[1])
        accepted.append((shard_pmids, shard_vectors))
    return accepted, missing, dim


def _merge_blocks(
    accepted: list[tuple[np.ndarray, np.ndarray]],
    lows: np.ndarray,
    highs: np.ndarray,
    out_pmids: np.ndarray,
    out_vectors: np.ndarray,
) -> int:
    """Write the shards' rows into the outputs in PMID order, one PMID block [low, high) at
    a time (only that block's rows in memory); the rows written. A PMID in two shards is an
    IndexBuildError."""
    bounds = [(int(p[0]), int(p[-1])) for p, _ in accepted]
    row = 0
    for low, high in zip(lows, highs, strict=True):
        block_pmids: list[np.ndarray] = []
        block_vectors: list[np.ndarray] = []
        for (first, last), (pmids, vectors) in zip(bounds, accepted, strict=True):
            if last < low or first >= high:
                continue
            lo, hi = np.searchsorted(pmids, [low, high], side="left")
            if hi > lo:
                block_pmids.append(np.asarray(pmids[lo:hi]))
                block_vectors.append(np.asarray(vectors[lo:hi]))
        if not block_pmids:
            continue
        pmids = np.concatenate(block_pmids)
        order = np.argsort(pmids, kind="stable")
        pmids = pmids[order]
        duplicated = pmids[1:][np.diff(pmids) == 0]
        if len(duplicated):
            raise IndexBuildError(
                f"{SHARDS}: PMIDs in more than one shard, e.g. {duplicated[:5].tolist()}"
            )
        n = len(pmids)
        out_pmids[row : row + n] = pmids
        out_vectors[row : row + n] = np.concatenate(block_vectors)[order]
        row += n
    return row


def build_index(
    lake: Lake,
    fingerprint: str,
    block_rows: int = 1 << 20,
    stride: int = 1024,
) -> IndexBuild:
    """Consolidate the verified shards of model ``fingerprint`` into the index."""
    started = time.perf_counter()
    expected = quotable_pmids_by_file(lake)

    # pass 1: verify, size, and sample the PMID space
    accepted, missing, dim = _verified_shards(lake, expected, fingerprint)
    total = sum(len(p) for p, _ in accepted)
    quotable = sum(len(p) for p in expected.values())
    missing_vectors = sum(len(expected[f]) for f in missing)
    if not accepted:
        raise IndexBuildError(
            f"{SHARDS}: no verified shard for model {fingerprint} "
            f"({len(missing)} files without one); materialise embedding_shards first"
        )

    sample = np.unique(np.concatenate([np.asarray(p[::stride]) for p, _ in accepted]))
    step = max(1, block_rows // stride)
    boundaries = sample[step::step]
    lows = np.concatenate([[np.iinfo(np.int64).min], boundaries])
    highs = np.concatenate([boundaries, [np.iinfo(np.int64).max]])

    # pass 2: fill memory-mapped outputs in a staging folder, then move them in
    staging = lake.staging_dir()
    try:
        out_vectors = np.lib.format.open_memmap(
            os.path.join(staging, "vectors.f16.npy"),
            mode="w+",
            dtype=np.float16,
            shape=(total, dim),
        )
        out_pmids = np.lib.format.open_memmap(
            os.path.join(staging, "pmids.npy"), mode="w+", dtype=np.int64, shape=(total,)
        )
        row = _merge_blocks(accepted, lows, highs, out_pmids, out_vectors)
        if row != total:
            raise IndexBuildError(f"{INDEX}: wrote {row} rows, expected {total}")
        out_vectors.flush()
        out_pmids.flush()
        arrays = {
            name: {
                "dtype": array.dtype.str,
                "length": int(array.shape[0]),
                "sha256": array_sha256(array),
                "nbytes": int(array.nbytes),
                "size": os.path.getsize(os.path.join(staging, key.rsplit("/", 1)[1])),
            }
            for name, key, array in (
                ("pmids", INDEX_PMIDS, out_pmids),
                ("vectors", INDEX_VECTORS, out_vectors),
            )
        }
        del out_vectors, out_pmids
        lake.move_in(INDEX_PMIDS, os.path.join(staging, "pmids.npy"))
        lake.move_in(INDEX_VECTORS, os.path.join(staging, "vectors.f16.npy"))
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    manifest = {
        "vectors": total,
        "dim": dim,
        "fingerprint": fingerprint,
        "shards": len(accepted),
        "arrays": arrays,
    }
    lake.write_bytes(INDEX_MANIFEST, json.dumps(manifest, indent=1).encode())
    return IndexBuild(
        vectors=total,
        dim=dim,
        quotable=quotable,
        shards=len(accepted),
        missing_files=tuple(sorted(missing)),
        missing_reasons=dict(sorted(missing.items())),
        missing_vectors=missing_vectors,
        seconds=time.perf_counter() - started,
    )


def _manifest(lake: Lake) -> dict:
    """The index manifest, its rows and dimension checked; ValueError naming the file."""
    try:
        manifest = json.loads(lake.read_bytes(INDEX_MANIFEST))
        int(manifest["vectors"]), int(manifest["dim"])
        for info in manifest.get("arrays", {}).values():
            int(info["size"]), str(info["sha256"])
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise ValueError(f"{lake.path(INDEX_MANIFEST)}: not an index manifest ({exc})") from exc
    return manifest


def index_problem(lake: Lake) -> str | None:
    """Why the published index does not match its manifest, naming the file (a manifest that
    is not one, an array file missing or not of the size the manifest records); None when it
    matches or none is published. Cheap: one listing, no array read."""
    if not lake.exists(INDEX_MANIFEST):
        return None
    try:
        manifest = _manifest(lake)
    except ValueError as exc:
        return str(exc)
    rows, dim = int(manifest["vectors"]), int(manifest["dim"])
    recorded = manifest.get("arrays", {})
    found = lake.sizes(INDEX)
    for name, key, data in (
        ("pmids", INDEX_PMIDS, 8 * rows),
        ("vectors", INDEX_VECTORS, 2 * rows * dim),
    ):
        size = found.get(key.rsplit("/", 1)[1])
        if size is None:
            return f"{lake.path(key)}: missing (the index manifest lists it)"
        if name in recorded:
            if size != int(recorded[name]["size"]):
                return (
                    f"{lake.path(key)}: {size} bytes, the index manifest says "
                    f"{recorded[name]['size']} bytes; rebuild embedding_index"
                )
        # manifests before sizes were recorded: the data and a header of at most 4 KiB
        elif not 0 < size - data <= 4096:
            return (
                f"{lake.path(key)}: {size} bytes, but the index manifest's {rows} rows "
                f"x {dim} give {data} bytes of data; rebuild embedding_index"
            )
    return None


def index_hash_problems(lake: Lake) -> list[str]:
    """Each published index array whose data no longer hashes to the sha256 its manifest
    records, one line naming the file (reads every array; the sizes first, as on open). An
    index whose manifest records no hashes (built before they were) has none to compare."""
    problem = index_problem(lake)
    if problem is not None:
        return [problem]
    if not lake.exists(INDEX_MANIFEST):
        return []
    problems = []
    for name, info in _manifest(lake).get("arrays", {}).items():
        key = INDEX_ARRAYS[name]
        if array_sha256(lake.read_npy(key)) != info["sha256"]:
            problems.append(
                f"{lake.path(key)}: sha256 differs from the index manifest's "
                f"({info['sha256'][:12]}…); rebuild embedding_index"
            )
    return problems


@dataclass(frozen=True)
class SampleCheck:
    checked: int
    mismatches: tuple[int, ...]  # PMIDs whose index row differs from their shard row

    @property
    def passed(self) -> bool:
        """No row differs, and at least one was compared: an empty index proves nothing."""
        return self.checked > 0 and not self.mismatches


def check_sample_against_shards(lake: Lake, sample: int = 64, seed: int = 0) -> SampleCheck:
    """Compare a random sample of index rows, bit for bit, with the rows in their shards."""
    pmids = lake.read_npy(INDEX_PMIDS)
    vectors = lake.read_npy(INDEX_VECTORS)
    rng = np.random.default_rng(seed)
    rows = np.sort(rng.choice(len(pmids), size=min(sample, len(pmids)), replace=False))
    by_file = quotable_pmids_by_file(lake)
    mismatches: list[int] = []
    wanted = {int(pmids[r]): int(r) for r in rows}
    for file, file_pmids in by_file.items():
        hits = np.intersect1d(file_pmids, np.fromiter(wanted, dtype=np.int64))
        if len(hits) == 0:
            continue
        shard_pmids = lake.read_npy(pmids_key(file))
        shard_vectors = lake.read_npy(vectors_key(file))
        for pmid in hits.tolist():
            at = int(np.searchsorted(shard_pmids, pmid))
            same = at < len(shard_pmids) and shard_pmids[at] == pmid
            if not same or not np.array_equal(shard_vectors[at], vectors[wanted[pmid]]):
                mismatches.append(pmid)
            del wanted[pmid]
    mismatches.extend(wanted)  # index rows whose PMID no current file holds
    return SampleCheck(checked=len(rows), mismatches=tuple(sorted(mismatches)))


@dataclass(frozen=True)
class NormCheck:
    checked: int
    min_norm: float
    max_norm: float

    def passed(self, tolerance: float = 1e-2) -> bool:
        """Every sampled norm within ``tolerance`` of 1, and at least one sampled."""
        return (
            self.checked > 0
            and abs(self.min_norm - 1) <= tolerance
            and abs(self.max_norm - 1) <= tolerance
        )


def check_norms(lake: Lake, sample: int = 10_000, seed: int = 0) -> NormCheck:
    """Norms of a random sample of index rows (unit vectors, up to fp16 rounding)."""
    vectors = lake.read_npy(INDEX_VECTORS)
    rng = np.random.default_rng(seed)
    rows = np.sort(rng.choice(len(vectors), size=min(sample, len(vectors)), replace=False))
    norms = np.linalg.norm(np.asarray(vectors[rows], dtype=np.float32), axis=1)
    if len(norms) == 0:
        return NormCheck(0, float("nan"), float("nan"))
    return NormCheck(len(norms), float(norms.min()), float(norms.max()))


def index_checks(lake: Lake, build: IndexBuild) -> list[CheckOutcome]:
    """The index's four checks (contracts.INDEX_CHECKS), on the index ``lake`` holds (in the
    asset, the staged one, before it is published)."""
    sample = check_sample_against_shards(lake)
    norms = check_norms(lake)
    unmatched = index_hash_problems(lake)
    return [
        CheckOutcome(
            "vector_count_equals_quotable",
            build.gap == 0 or build.gap_explained,
            metadata={
                "vectors": build.vectors,
                "quotable": build.quotable,
                "gap": build.gap,
                "explained_by_missing_shards": build.missing_vectors,
                "missing_files": dict(list(build.missing_reasons.items())[:50]),
            },
        ),
        CheckOutcome(
            "sample_rows_match_shards",
            sample.passed,
            metadata={"checked": sample.checked, "mismatched_pmids": list(sample.mismatches[:20])},
        ),
        CheckOutcome(
            "norms_about_one",
            norms.passed(),
            metadata={"checked": norms.checked, "min": norms.min_norm, "max": norms.max_norm},
        ),
        CheckOutcome("files_match_manifest", not unmatched, metadata={"problems": unmatched}),
    ]
