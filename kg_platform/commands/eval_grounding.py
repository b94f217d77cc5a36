"""`kg eval grounding --pubmedqa PATH [--json] [--lake DIR] [--mesh-source PATH]
[--release R --mesh-year Y]`: register the question set and materialise grounding_report
(question set x MeSH year) through the persistent Dagster instance, with the graph build's
release as its run config (roles from that graph's article counts; none: from MeSH
structure), so the run and its check show in the UI. ``--mesh-source`` first materialises
mesh_tables of that source's year into the lake, and grounds without a graph."""

from __future__ import annotations

import argparse
import json
import sys

from kg_platform.commands.partition_args import add_partition_args
from kg_platform.storage.reports import GROUNDING as REPORT


def add_eval_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "grounding",
        help="precision, recall and coverage of BRIDGE groundings against PubMedQA headings",
    )
    add_report_args(parser)
    parser.set_defaults(func=run_eval_grounding)


def add_report_args(parser: argparse.ArgumentParser) -> None:
    """The options of both grounding studies (``kg eval hybrid`` adds its own)."""
    parser.add_argument("--pubmedqa", required=True, help="PubMedQA JSON (pqal_*.json)")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    parser.add_argument("--lake", default=None, help="lake holding mesh/ (and graph/)")
    parser.add_argument(
        "--mesh-source", help="MeSH folder/URL whose tables are materialised into the lake first"
    )
    add_partition_args(parser)


def graph_build(args: argparse.Namespace, lake) -> dict[str, str | None]:
    """The (release, MeSH year) grounded against: the MeSH source's year and no graph, or
    the lake's chosen graph build (a MeSH year alone when none is built)."""
    if args.mesh_source:
        from kg_platform.mesh.source import mesh_year, resolve_mesh_source

        return {"release": None, "mesh_year": str(mesh_year(resolve_mesh_source(args.mesh_source)))}
    from kg_platform.commands.partition_args import scoped_lake

    _, build = scoped_lake(args, quiet=args.json, need_graph=False)
    if build["mesh_year"] is None:
        raise ValueError(f"{lake.root}: no MeSH year partition; build the lake with kg build")
    return build


def run_eval_grounding(args: argparse.Namespace) -> int:
    return run_report(args, "grounding", {}, {})


def run_report(args: argparse.Namespace, command: str, config: dict, resources: dict) -> int:
    """Register the question set, materialise grounding_report with ``config`` beside the
    graph build's release, print its report (``kg eval hybrid``: the hybrid one, also
    copied to ``--report-dir``); the exit code."""
    from kg_platform.evaluation.common.question_sets import register_question_set
    from kg_platform.evaluation.grounding.evaluation import load_pubmedqa
    from kg_platform.settings import Settings
    from kg_platform.storage.lake import Lake

    settings = Settings.load()
    args.lake = args.lake or settings.lake
    lake = Lake(args.lake)
    try:
        load_pubmedqa(args.pubmedqa)  # a file that is no PubMedQA set is named here
        build = graph_build(args, lake)
        question_set = register_question_set(lake, "pubmedqa", args.pubmedqa)
    except (OSError, ValueError) as error:
        print(f"kg eval {command}: {error}", file=sys.stderr)
        return 2
    config = {"release": build["release"] or "", **config}
    key = {"question_set": question_set, "mesh_year": build["mesh_year"]}
    failure = materialise(settings, lake, key, args.mesh_source, command, config, resources)
    if failure:
        print(f"kg eval {command}: {failure}", file=sys.stderr)
        return 1
    folder = f"{REPORT}/{question_set}/{build['mesh_year']}"
    folder += "/hybrid" if command == "hybrid" else ""
    if getattr(args, "report_dir", None):
        out = Lake(args.report_dir)  # a folder or s3://bucket/prefix, each file atomically
        for name in ("report.md", "report.json"):
            out.write_bytes(name, lake.read_bytes(f"{folder}/{name}"))
    if args.json:
        doc = json.loads(lake.read_bytes(f"{folder}/report.json"))
        print(json.dumps({**doc, "partition": build}))
    else:
        print(lake.read_bytes(f"{folder}/report.md").decode(), end="")
    return 0


def materialise(
    settings, lake, key: dict[str, str], mesh_source: str | None, command: str, config, resources
) -> str:
    """grounding_report of ``key`` (question set, MeSH year) with run ``config`` and
    ``resources`` beside the defaults on the persistent instance, after mesh_tables of that
    year from ``mesh_source`` when given; the failure, or ""."""
    from kg_platform.assets import grounding, mesh
    from kg_platform.assets.partitions import mesh_years, pubmedqa_sets
    from kg_platform.orchestration.materialise import materialise as run
    from kg_platform.resources.encoder import EncoderResource
    from kg_platform.resources.lake import LakeResource
    from kg_platform.resources.mesh import MeshSourceResource

    partitions = {pubmedqa_sets: [key["question_set"]], mesh_years: [key["mesh_year"]]}
    steps = [("mesh_tables", key["mesh_year"])] if mesh_source else []
    defaults = {
        "mesh_source": MeshSourceResource(location=mesh_source or ""),
        "encoder": EncoderResource(),
    }
    return run(
        settings,
        [*mesh.defs.assets, *grounding.defs.assets],
        partitions,
        [*steps, ("grounding_report", key)],
        f"eval {command}",
        lake=LakeResource(root=lake.root),
        configs={"grounding_report": config},
        resources={**defaults, **resources},
    )
