"""What `kg build` prints: one line per run as it ends, each run as it starts and each file as
a run records it, a bar over the files; then a summary whose counts come from the instance,
and a few questions the graph built answers."""

from __future__ import annotations

import time
from pathlib import Path

from kg_platform.orchestration.backfill import Reporter


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
    not_run = result.never_run(todo) if result is not None else []
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
