"""Whether a published object still matches what was published: the instance can say a
partition is fresh while its files were truncated or overwritten since. `kg status` reports
such a partition as `corrupt`, naming the object, and `kg build` redoes it without --force.

Every published object is checked, each asset's as published.py says. A published object
that is gone is `corrupt`, named with ": missing".

Three levels, cheapest first:
- the cheap check, on every status and every build plan (one listing per folder, the
  manifests and headers; no full read): each object is there at the size its
  materialisation or manifest records (the raw file, a file's tables in all, each MeSH
  table, each corpus part, the graph's pointer, manifest and arrays, the embedding index's
  two arrays, the grounding index's two files and the index's own header);
- the stamp: a file written after its partition's latest materialisation (its mtime, an S3
  object's LastModified, later than the instance's event) was changed since it was
  published, at any size. Files are published inside the asset's lake transaction, before
  Dagster records the materialisation, so a file the build wrote is never later than it.
  Such a partition's content is then hashed to confirm (a file copied or touched with the
  same bytes is not corrupt);
- the hashes (``verify``, `kg status --verify`, `kg build --verify`: every byte read): each
  array or file against the sha256 its manifest records (the graph, the embedding index,
  the grounding index), the tables against the data version of their materialisation (the
  digest of their bytes), the raw file against its md5.

`kg status --verify` records what the hashes found (FINDINGS, beside the instance), so a
plain `kg build` redoes it: a byte changed in place with its modification time put back is
seen only by the hashes, and hashing every published byte on every build would read the
whole lake (GBs at 10M records). The build hashes again only the partitions recorded there
whose materialisation is still the one judged, and redoes those that still differ."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from kg_platform.assets.published import CHECKED, Listings
from kg_platform.orchestration.records import Recorded, latest
from kg_platform.storage.lake import Lake

# beside the instance: what the last `kg status --verify` (or `kg build --verify`) found
FINDINGS = "verify_findings.json"


def changed_since(
    lake: Lake, files: list[str], materialised: Recorded, seen: Listings | None = None
) -> str | None:
    """The files written after the materialisation, in one line with its time; None when
    none was."""
    import time

    seen = seen or Listings()
    later = []
    for key in files:
        entry = seen.entry(lake, key)
        when = entry[1] if entry is not None else lake.modified(key)
        if when > materialised.timestamp:
            later.append(key)
    if not later:
        return None
    when = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(materialised.timestamp))
    names = ", ".join(key.rsplit("/", 1)[1] for key in later)
    return (
        f"written after {materialised.asset}[{materialised.partition}] was materialised "
        f"at {when}: {names}"
    )


class Integrity:
    """Checks published objects against what the instance recorded, sharing the listings
    and (with a BulkStaleStatusResolver, orchestration/freshness.py) reading every
    partition's latest materialisation of an asset in one pass."""

    def __init__(self, lake: Lake | str, instance=None, resolver=None, verify: bool = False):
        self.lake = lake if isinstance(lake, Lake) else Lake(lake)
        self.instance, self.resolver, self.verify = instance, resolver, verify
        self.seen = Listings()

    def materialised(self, asset: str, partition: str) -> Recorded | None:
        if self.instance is None:
            return None
        return latest(self.instance, asset, partition, resolver=self.resolver)

    def problem(self, asset: str, partition: str | None, verify: bool | None = None) -> str | None:
        """One line naming what of ``asset``'s published ``partition`` no longer matches what
        was published; None when it matches or the asset is not checked. A file written
        after the partition's latest materialisation has its content hashed; with
        ``verify``, every published file is hashed."""
        checks = CHECKED.get(asset)
        if checks is None or partition is None:
            return None
        verify = self.verify if verify is None else verify
        try:
            scoped = checks.scope(self.lake, partition)
            materialised = self.materialised(asset, partition)
            problem = checks.cheap(scoped, materialised, self.seen)
            if problem is not None:
                return problem
            if verify:
                return checks.hashed(scoped, materialised, self.seen)
            if materialised is None:
                return None
            files = checks.files(scoped, materialised, self.seen)
            changed = changed_since(scoped, files, materialised, self.seen)
            if changed is None:
                return None
            problem = checks.hashed(scoped, materialised, self.seen)
            return None if problem is None else f"{problem} ({changed})"
        except (ValueError, OSError) as exc:
            return str(exc)


def published_problem(
    lake: Lake, asset: str, partition: str | None, verify: bool = False, instance=None
) -> str | None:
    """Integrity.problem for one partition (``instance``: compared with its latest
    materialisation)."""
    return Integrity(lake, instance, verify=verify).problem(asset, partition)


# -- what the hashes found, for the next build ----------------------------------------------
def record_findings(dagster_home: Path, lake_root: str, found: list[tuple[Recorded, str]]):
    """Write what a verify found (each partition's judged materialisation and its line),
    replacing the previous record: a verify judges every partition."""
    from kg_platform.settings.local import write_text_atomically

    entries = [
        {
            "asset": m.asset,
            "partition": str(m.partition),
            "materialised_at": m.timestamp,
            "problem": line,
        }
        for m, line in found
    ]
    record = {"lake": lake_root, "found": entries}
    write_text_atomically(dagster_home / FINDINGS, json.dumps(record, indent=1) + "\n")


def recorded_findings(dagster_home: Path, lake_root: str) -> dict[tuple[str, str], float]:
    """(asset, partition) -> the materialisation time a verify judged, for this lake."""
    try:
        record = json.loads((dagster_home / FINDINGS).read_text())
    except (OSError, ValueError):
        return {}
    if not isinstance(record, dict) or record.get("lake") != lake_root:
        return {}
    return {
        (e["asset"], e["partition"]): float(e["materialised_at"])
        for e in record.get("found", [])
        if isinstance(e, dict) and {"asset", "partition", "materialised_at"} <= set(e)
    }


def damaged(lake_root: str, verify: bool = False, findings: dict | None = None) -> Callable:
    """For the build planner: ``(AssetKeyPartitionKey, instance, resolver) -> bool``, whether
    the partition's published object is damaged: the cheap check and the stamps always;
    the hashes with ``verify``, or where ``findings`` (recorded_findings) says a verify found
    this partition's current materialisation differing."""
    checks: dict = {}
    found_lines: list[str] = []

    def judge(ap, instance=None, resolver=None) -> bool:
        key = (id(instance), id(resolver))
        if key not in checks:
            checks[key] = Integrity(lake_root, instance, resolver, verify)
        integrity = checks[key]
        asset, partition = ap.asset_key.to_user_string(), ap.partition_key
        found = (findings or {}).get((asset, str(partition)))
        again = False
        if found is not None and not verify:
            m = integrity.materialised(asset, partition)
            again = m is not None and abs(m.timestamp - found) < 1e-6
        problem = integrity.problem(asset, partition, verify=verify or again)
        if problem is not None:
            found_lines.append(f"{asset}[{partition}]: {problem}")
        return problem is not None

    judge.found = found_lines  # type: ignore[attr-defined]
    return judge
