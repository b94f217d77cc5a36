"""The fold's own state beside the corpus and its integrity: the manifest (the files folded,
an identity of each one's per-file tables, every part's bytes, sha256 and rows, the figures),
the DeleteCitation state, what an incremental fold changed, whether a later fold may start
from it, the corpus's content identity, and the publication of a fold's staged parts."""

from __future__ import annotations

import hashlib
import json
import os
import posixpath

import polars as pl
import pyarrow.parquet as pq

from kg_platform.pubmed.fold.base import FoldResult
from kg_platform.settings import FULL_FOLD_ENV, full_fold_forced
from kg_platform.storage.corpus import (
    CORPUS_TABLES,
    FOLD,
    FOLD_DELETIONS,
    FOLD_MANIFEST,
    FOLD_TOUCHED,  # noqa: F401 (the fold's and the graph's modules import it from here)
    PMID_BUCKET,
    corpus_folder,
    corpus_parts,
    legacy_key,
    part_bucket,
    part_key,
    part_name,
)
from kg_platform.storage.digest import file_sha256
from kg_platform.storage.lake import Lake
from kg_platform.storage.tables import table_key, tables_folder

# The fold's own state beside the corpus (not a corpus table: no catalog view, no listing):
# the files folded, an identity of each one's per-file tables, the corpus tables' sizes and
# figures, and every PMID named by a DeleteCitation (the last file naming it, and whether it
# removed a record), which is what a later update needs besides the corpus itself.
# what the last incremental fold changed, for a graph build that checks only the change
# (kg_platform.graph.checks): the PMIDs the new files touched, and the rows of those PMIDs
# the previous corpus held in these tables; the manifest's base_inputs are the fingerprints
# (Lake.fingerprint) of the corpus tables it replaced
REPLACED_TABLES = ("citations", "mesh_edges")
# and the rows of the touched PMIDs the new corpus holds (the new files' winners), in corpus
# order: a graph build patches the previous build's arrays with them (kg_platform.graph.patch)
ADDED_TABLES = ("articles", "citations", "mesh_edges", "corrections", "pubtypes")


def replaced_key(table: str) -> str:
    return f"{FOLD}/replaced_{table}.parquet"


def added_key(table: str) -> str:
    return f"{FOLD}/added_{table}.parquet"


# bump when the fold's rules or its state change: the next fold is then a full one
# (format 2: the corpus as parts per PMID bucket; format 1 kept each table in one file)
FOLD_FORMAT = 2
LAYOUT_CHANGE = "corpus layout: single files -> parts"
# KG_FOLD_FULL=1: every fold reads every file (the reference the incremental fold equals)
STATE_SCHEMA = {"pmid": pl.Int64, "deleted_ord": pl.Int32, "removed": pl.Boolean}


def file_stamps(lake: Lake, files: list[str]) -> dict[str, str]:
    """An identity per file of its seven per-file tables (their sizes and modification times,
    or S3 ETags), so a file parsed again is never taken for the one a corpus was folded from."""
    parts: dict[str, list[str]] = {f: [] for f in files}
    for table in [*CORPUS_TABLES, "deletions"]:
        if lake.is_local:
            for f in files:
                st = os.stat(lake.path(table_key(table, f)))
                parts[f].append(f"{st.st_size}:{st.st_mtime_ns}")
            continue
        listed = {
            posixpath.basename(e["name"]).removesuffix(".parquet"): e
            for e in lake.fs.ls(lake.path(tables_folder(table)), detail=True)
        }
        for f in files:
            entry = listed.get(f, {})
            parts[f].append(f"{entry.get('size')}:{entry.get('ETag') or entry.get('LastModified')}")
    return {f: hashlib.sha256("|".join(p).encode()).hexdigest()[:20] for f, p in parts.items()}


def previous_fold(lake: Lake, files: list[str], stamps: dict[str, str]) -> tuple[dict | None, str]:
    """The manifest of the corpus in ``lake`` when ``files`` can be folded into it (a prefix
    of ``files``, unchanged since, the corpus as that fold wrote it), else None; and why."""
    if full_fold_forced():
        return None, f"{FULL_FOLD_ENV}=1"
    if any(lake.exists(legacy_key(t)) for t in CORPUS_TABLES):
        return None, LAYOUT_CHANGE
    if not lake.exists(FOLD_MANIFEST):
        return None, "no previous fold in the lake"
    try:
        manifest = json.loads(lake.read_bytes(FOLD_MANIFEST))
        folded = list(manifest["files"])
        if manifest.get("format") == 1:
            return None, LAYOUT_CHANGE
        if manifest.get("format") != FOLD_FORMAT:
            return None, f"the previous fold has format {manifest.get('format')}"
        if not isinstance(manifest.get("parts"), dict):
            raise KeyError("parts")
    except (ValueError, KeyError, TypeError) as exc:
        return None, f"{lake.path(FOLD_MANIFEST)}: unreadable ({exc})"
    if files[: len(folded)] != folded:
        return None, "the previous fold read other files"
    changed = [f for f in folded if manifest.get("stamps", {}).get(f) != stamps[f]]
    if changed:
        return None, f"{len(changed)} folded file(s) parsed again since (first: {changed[0]})"
    parts = manifest.get("parts", {})
    for table in CORPUS_TABLES:
        published = lake.sizes(corpus_folder(table))
        expected = {part_name(int(b)): e["bytes"] for b, e in parts.get(table, {}).items()}
        if published != expected:
            return (
                None,
                f"{lake.path(corpus_folder(table))} is not the table the previous fold wrote",
            )
    changed_part = _part_changed_since(lake, manifest)
    if changed_part is not None:
        return None, f"{lake.path(changed_part)} is not the part the previous fold wrote"
    if not lake.exists(FOLD_DELETIONS):
        return None, f"{lake.path(FOLD_DELETIONS)}: missing"
    return manifest, f"{len(folded)} files folded before"


def _part_changed_since(lake: Lake, manifest: dict) -> str | None:
    """The first corpus part overwritten since the fold at its size: written after the
    fold's manifest (which the fold writes last) and no longer of the sha256 the manifest
    records. Only such a part is read, so an untouched corpus costs a stat per part."""
    written = lake.modified(FOLD_MANIFEST)
    for table, entries in manifest["parts"].items():
        for bucket, entry in entries.items():
            key = part_key(table, int(bucket))
            if lake.modified(key) <= written:
                continue
            with lake.open(key) as f:
                if file_sha256(f) != entry["sha256"]:
                    return key
    return None


def _sha256(path: str) -> str:
    with open(path, "rb") as f:
        return file_sha256(f)


def part_entry(local: str, rows: int | None = None) -> dict:
    """A staged part's manifest entry: its bytes, sha256 and rows (``rows`` when the writer
    counted them, else from its footer)."""
    return {
        "bytes": os.path.getsize(local),
        "sha256": _sha256(local),
        "rows": pq.ParquetFile(local).metadata.num_rows if rows is None else rows,
    }


def staged_parts(
    staging: str,
    carried: dict[str, dict[str, dict]],
    known: dict[str, dict[str, dict]] | None = None,
) -> dict[str, dict[str, dict]]:
    """The parts of each table as they will be published: ``carried`` (bucket -> entry of
    the previous manifest, for the parts kept as they are) and those written under
    ``staging/<table>/``, each with its bytes, sha256 and rows (part_entry), by bucket;
    ``known``: the entries of staged parts already taken by their writers (the full fold's
    tasks, in parallel), which are not read again."""
    parts: dict[str, dict[str, dict]] = {}
    for table in CORPUS_TABLES:
        entries = dict(carried.get(table, {}))
        taken = (known or {}).get(table, {})
        folder = os.path.join(staging, table)
        for name in sorted(os.listdir(folder)) if os.path.isdir(folder) else []:
            bucket = str(part_bucket(name))
            entries[bucket] = taken.get(bucket) or part_entry(os.path.join(folder, name))
        parts[table] = dict(sorted(entries.items(), key=lambda e: int(e[0])))
    return parts


def corpus_digest(parts: dict[str, dict[str, dict]]) -> str:
    """The content identity of a corpus (the corpus asset's data version): sha256 over each
    part's key and sha256, tables in CORPUS_TABLES order, parts in PMID order."""
    digest = hashlib.sha256()
    for table in CORPUS_TABLES:
        for bucket, entry in sorted(parts.get(table, {}).items(), key=lambda e: int(e[0])):
            digest.update(f"{part_key(table, int(bucket))}\0{entry['sha256']}\n".encode())
    return digest.hexdigest()


def corpus_version(lake: Lake, verify: bool = False) -> str:
    """corpus_digest of the corpus in ``lake``: of the parts its fold's manifest records
    (what the corpus asset's data version is made of), or with ``verify`` of every part's
    bytes as they are now."""
    parts = _manifest_parts(lake)
    if verify:
        parts = {
            table: {
                bucket: {"sha256": _lake_sha256(lake, part_key(table, int(bucket)))}
                for bucket in entries
            }
            for table, entries in _listed_parts(lake).items()
        }
    return corpus_digest(parts)


def parts_problem(lake: Lake) -> str | None:
    """What of the corpus parts in ``lake`` is not as its fold's manifest records (a part
    missing, added or of another size), in one line; None when every part is."""
    expected = _manifest_parts(lake)
    for table in CORPUS_TABLES:
        folder = corpus_folder(table)
        published = lake.sizes(folder)
        if not published:
            return f"{lake.path(folder)}: missing"
        recorded = {part_name(int(b)): e["bytes"] for b, e in expected.get(table, {}).items()}
        for name in sorted(set(published) | set(recorded)):
            if name not in recorded:
                return f"{lake.path(folder)}/{name}: a part the fold did not write"
            if name not in published:
                return f"{lake.path(folder)}/{name}: missing"
            if published[name] != recorded[name]:
                return (
                    f"{lake.path(folder)}/{name}: {published[name]} bytes, the fold wrote "
                    f"{recorded[name]}"
                )
    return None


def _manifest_parts(lake: Lake) -> dict[str, dict[str, dict]]:
    try:
        return json.loads(lake.read_bytes(FOLD_MANIFEST))["parts"]
    except FileNotFoundError:
        raise FileNotFoundError(
            f"{lake.path(FOLD_MANIFEST)}: missing; materialise `corpus`"
        ) from None
    except (ValueError, KeyError, TypeError) as exc:
        raise ValueError(
            f"{lake.path(FOLD_MANIFEST)}: not a fold manifest with parts ({exc})"
        ) from None


def _listed_parts(lake: Lake) -> dict[str, list[str]]:
    return {t: [str(part_bucket(k)) for k in corpus_parts(lake, t)] for t in CORPUS_TABLES}


def _lake_sha256(lake: Lake, key: str) -> str:
    with lake.open(key) as f:
        return file_sha256(f)


def publish(
    lake: Lake,
    staging: str,
    result: FoldResult,
    stamps: dict[str, str],
    state: pl.DataFrame,
    parts: dict[str, dict[str, dict]],
    change: dict[str, object] | None = None,
) -> None:
    """The parts written under ``staging`` and the fold's state, each moved into the lake
    atomically; the published parts that are not in ``parts`` (and the tables of the
    single-file layout) removed; after an incremental fold, ``change`` (base_inputs and the
    local files of FOLD_TOUCHED and each replaced_key) too. The manifest comes last."""
    change = change or {}
    state_local = os.path.join(staging, "deletions.parquet")
    state.select(pl.col(c).cast(t) for c, t in STATE_SCHEMA.items()).write_parquet(state_local)
    manifest = {
        "format": FOLD_FORMAT,
        "files": result.files,
        "stamps": stamps,
        "bucket": PMID_BUCKET,
        "parts": parts,
        "rows": result.rows,
        "deleted": result.deleted,
        "deletions_listed": result.deletions_listed,
        "dangling_citations": result.dangling_citations,
        # how this corpus was made, for the operator (never read back by the fold)
        "mode": result.mode,
        "reason": result.reason,
        "new_files": result.new_files,
        "touched_pmids": result.touched_pmids,
        "touched_parts": len(result.touched_parts),
        # the corpus this fold started from (only after an incremental fold)
        **({"base_inputs": change["base_inputs"]} if "base_inputs" in change else {}),
    }
    for table in CORPUS_TABLES:
        published = corpus_parts(lake, table)
        folder = os.path.join(staging, table)
        for name in sorted(os.listdir(folder)) if os.path.isdir(folder) else []:
            lake.move_in(part_key(table, part_bucket(name)), os.path.join(folder, name))
        for key in published:
            if str(part_bucket(key)) not in parts[table]:
                lake.remove(key)
        if lake.exists(legacy_key(table)):
            lake.remove(legacy_key(table))
    lake.copy_in(FOLD_DELETIONS, state_local)
    for key, local in change.get("files", {}).items():  # type: ignore[union-attr]
        lake.copy_in(key, local)
    lake.write_bytes(FOLD_MANIFEST, json.dumps(manifest, indent=1).encode())
