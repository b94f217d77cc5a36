"""`kg status [--lake DIR]`: per release, MeSH year and graph build, what is materialised,
failed, missing or stale, read from the persistent Dagster instance (as the UI reads it).
What is built from a partition that is not fresh (a file that failed, say) is stale too,
naming that partition."""

from __future__ import annotations

import argparse
import os
from collections import Counter


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("status", help="what is materialised, failed, missing or stale")
    p.add_argument("--lake", default=None)
    p.add_argument(
        "--verify",
        action="store_true",
        help="also hash every published file against what was recorded at publication "
        "(the manifests' sha256, the corpus tables' data version; reads them all)",
    )
    p.set_defaults(func=run_status)


def other_source_tables(lake, files: set[str]) -> list[str]:
    """Per-file tables in the lake whose file is no partition of the current source."""
    from kg_platform.storage.tables import tabled_files

    return sorted(tabled_files(lake) - files)


def run_status(args: argparse.Namespace) -> int:
    from kg_platform.assets.partitions import pubmed_files
    from kg_platform.assets.status import STATES, not_ok, partition_states, record_verified
    from kg_platform.definitions import build_definitions
    from kg_platform.orchestration.instance import open_instance
    from kg_platform.settings import Settings
    from kg_platform.storage.lake import Lake

    settings = Settings.load()
    lake = Lake(args.lake)  # a --lake that is no folder is named here; nothing is created
    # a read command reads: the instance as it is, its dagster.yaml and pools untouched
    instance = open_instance(settings.dagster_home)
    if instance is not None and lake.is_local and not os.path.isdir(lake.root):
        # every partition would read as missing or corrupt: a mistyped path is not a lake
        raise FileNotFoundError(f"--lake {args.lake}: no lake there ({lake.root} does not exist)")
    if instance is None:
        print(f"instance {settings.dagster_home}: none yet (nothing built); lake {args.lake}")
        return 0
    asset_graph = build_definitions(settings).resolve_asset_graph()
    problems: dict[tuple[str, str], str] = {}
    states = partition_states(instance, asset_graph, problems, lake, args.verify)
    if args.verify:
        record_verified(settings.dagster_home, args.lake, instance, states, problems)
    print(f"instance {settings.dagster_home}; lake {args.lake}")
    for asset, per in states.items():
        counts = Counter(per.values())
        summary = ", ".join(f"{counts[s]} {s}" for s in STATES if counts[s]) or "no partitions"
        print(f"{asset}: {summary}")
        for partition, state in sorted(per.items()):
            if state != "fresh" or len(per) <= 8:
                problem = problems.get((asset, partition))
                detail = f": {problem}" if problem else ""
                print(f"  {partition or '(unpartitioned)'}: {state}{detail}")
    files = set(instance.get_dynamic_partitions(pubmed_files.name))
    others = other_source_tables(lake, files)
    if others:
        print(
            f"stale: {len(others)} files' tables from another source, no longer partitions "
            f"(first: {', '.join(others[:5])})"
        )
    bad = not_ok(states)
    if bad:
        print(f"not ok: {', '.join(f'{n} {s}' for s, n in bad.items())}")
        return 1
    return 0
