"""What a finished run says (its assets, partition, status, checks, the files it recorded and
each failure's one-line cause, read from the instance's event log), and runs of a few assets
materialised in turn in this process (`kg eval ...`)."""

from __future__ import annotations

import re
import sys
import time
from dataclasses import dataclass, field

TERMINAL = {"SUCCESS", "FAILURE", "CANCELED"}
# the progress lines are the user's view; Dagster's event log stays in the instance (and UI)
QUIET = {"loggers": {"console": {"config": {"log_level": "WARNING"}}}}


@dataclass(frozen=True)
class FileRuns:
    """The assets partitioned by file that one step materialises for a range of files, and
    the name of their dynamic partitions: a run over them is reported file by file."""

    assets: frozenset[str] = frozenset()
    partitions: str = ""


NO_FILES = FileRuns()


@dataclass
class RunOutcome:
    run_id: str
    assets: list[str]
    partition: str | None
    status: str
    seconds: float
    checks_passed: int
    checks_failed: int
    failure: str | None = None  # the one-line cause
    traceback: str | None = None
    # a run over file partitions: the files it recorded, and each failed file's cause
    files_recorded: list[str] = field(default_factory=list)
    files_failed: dict[str, str] = field(default_factory=dict)

    @property
    def label(self) -> str:
        where = f" [{self.partition}]" if self.partition else ""
        return "+".join(self.assets) + where

    def label_of(self, file: str) -> str:
        """The label of one file of the run, as if it had been a run of its own."""
        return "+".join(self.assets) + f" [{file}]"


def run_outcome(instance, record, files: FileRuns = NO_FILES) -> RunOutcome:
    import dagster as dg

    run = record.dagster_run
    evaluations = [
        r.event_log_entry.dagster_event.event_specific_data
        for r in instance.get_records_for_run(
            run.run_id, of_type=dg.DagsterEventType.ASSET_CHECK_EVALUATION
        ).records
    ]
    passed = sum(e.passed for e in evaluations)
    start = record.start_time or record.create_timestamp.timestamp()
    end = record.end_time or start
    assets = sorted(k.to_user_string() for k in run.asset_selection or ())
    outcome = RunOutcome(
        run_id=run.run_id,
        assets=assets,
        partition=partition_label(run.tags),
        status=run.status.value,
        seconds=end - start,
        checks_passed=passed,
        checks_failed=len(evaluations) - passed,
    )
    if files.assets & set(assets):
        outcome.files_recorded = files_recorded(instance, run.run_id, files.assets & set(assets))
    if run.status.value != "SUCCESS":
        outcome.failure, outcome.traceback = run_failure(instance, run.run_id)
        if files.assets & set(assets):
            outcome.files_failed = files_failed(instance, run, outcome, files.partitions)
    return outcome


RANGE_START, RANGE_END = "dagster/asset_partition_range_start", "dagster/asset_partition_range_end"


def partition_label(tags) -> str | None:
    """``pubmed26n0001``, or ``pubmed26n0001..pubmed26n0016`` for a run over a range."""
    if "dagster/partition" in tags:
        return tags["dagster/partition"]
    start, end = tags.get(RANGE_START), tags.get(RANGE_END)
    if start is None:
        return None
    return start if start == end else f"{start}..{end}"


def files_recorded(instance, run_id: str, assets: set[str]) -> list[str]:
    """The files a run recorded: partitions materialised for every file asset it ran."""
    import dagster as dg

    by_asset: dict[str, set[str]] = {a: set() for a in assets}
    for r in instance.get_records_for_run(
        run_id, of_type=dg.DagsterEventType.ASSET_MATERIALIZATION, limit=100_000
    ).records:
        event = r.event_log_entry.dagster_event
        name = event.asset_key.to_user_string()
        if name in by_asset and event.partition:
            by_asset[name].add(event.partition)
    return sorted(set.intersection(*by_asset.values())) if by_asset else []


def files_failed(instance, run, outcome: RunOutcome, partitions: str) -> dict[str, str]:
    """Each file of a failed run that it did not record, with its cause: the step's own
    per-file causes when it named them, else the run's failure."""
    import dagster as dg

    named: dict[str, str] = {}
    for r in instance.get_records_for_run(
        run.run_id, of_type=dg.DagsterEventType.STEP_FAILURE
    ).records:
        data = r.event_log_entry.dagster_event.event_specific_data
        failure = getattr(data, "user_failure_data", None)
        value = (failure.metadata or {}).get("failed_files") if failure else None
        if value is not None:
            named.update(value.value)
    recorded = set(outcome.files_recorded)
    return {
        f: named.get(f, outcome.failure or "failed")
        for f in files_in_range(instance, run.tags, partitions)
        if f not in recorded
    }


def files_in_range(instance, tags, partitions: str) -> list[str]:
    """The file partitions (of the dynamic ``partitions``) a run was asked for, in order."""
    if "dagster/partition" in tags:
        return [tags["dagster/partition"]]
    start, end = tags.get(RANGE_START), tags.get(RANGE_END)
    if start is None:
        return []
    keys = instance.get_dynamic_partitions(partitions)
    if start not in keys or end not in keys:
        return [start] if start == end else [start, end]
    return keys[keys.index(start) : keys.index(end) + 1]


def innermost(error):
    """The first error under Dagster's wrappers: the domain error, which names the input."""
    while error.cause is not None and (error.cls_name or "").startswith("Dagster"):
        error = error.cause
    return error


# "package.module.SomeError: " or a builtin's "ValueError: " before a recorded message
CLASS_PREFIX = re.compile(r"^(?:(?:[A-Za-z_]\w*\.)+[A-Z]\w*|[A-Z]\w*(?:Error|Exception)): ")
STEP_PREFIX = re.compile(r"^\[([^\]]+)\]: ")


def one_line(error) -> str:
    lines = [x.strip() for x in (error.message or "").strip().splitlines() if x.strip()]
    if not lines:
        return "failed"
    # drop the 'package.module.ErrorClass: ' that Dagster puts before the message
    prefix, _, rest = lines[0].partition(": ")
    line = rest if rest and prefix.endswith(error.cls_name or "\0") else lines[0]
    step = STEP_PREFIX.match(lines[1]) if len(lines) > 1 and line.endswith(":") else None
    if step:
        # a header over per-step errors (dagster-celery's "errors occurred in workers:\n
        # [step]: package.Error: cause"): the first step's own cause is the line to show
        cause = CLASS_PREFIX.sub("", lines[1][step.end() :], count=1)
        return cause if cause.startswith(f"step {step.group(1)}") else f"{step.group(1)}: {cause}"
    return line


def run_failure(instance, run_id: str) -> tuple[str, str]:
    """(one line: the step and the cause, the full error chain) of a failed run."""
    import dagster as dg

    for kind in (dg.DagsterEventType.STEP_FAILURE, dg.DagsterEventType.RUN_FAILURE):
        for record in instance.get_records_for_run(run_id, of_type=kind).records:
            event = record.event_log_entry.dagster_event
            data = event.event_specific_data
            error = getattr(data, "error", None)
            if error is None:
                continue
            return one_line(innermost(error)), error.to_string()
    cause = worker_death(instance, run_id)
    return cause or "run failed (see the run in the UI)", cause or ""


# the code server's engine event when a run's process ends before the run does (Dagster's
# get_run_crash_explanation: "... was terminated by signal 9 (SIGKILL)." or "...
# unexpectedly exited with code 3.")
CRASH_PREFIX = "Run execution process for "


def worker_death(instance, run_id: str) -> str | None:
    """Why a run failed with no error of its own: its process died. The signal or exit code
    (the code server's crash event, else the run's failure message, e.g. recovery's
    "process gone"), its worker's pid and the last event the run logged; None when neither
    event says more."""
    from kg_platform.orchestration.recovery import run_worker

    records = instance.get_records_for_run(run_id, ascending=False, limit=500).records
    crash = failure = last = None
    for record in records:
        entry = record.event_log_entry
        event = entry.dagster_event
        message = " ".join((entry.message or "").split())
        kind = event.event_type_value if event is not None else "LOG"
        at = message.find(f"{CRASH_PREFIX}{run_id} ")  # after the server's "[name] "
        if crash is None and at >= 0:
            crash = message[at + len(f"{CRASH_PREFIX}{run_id} ") :].split(". ")[0].rstrip(".")
        elif failure is None and kind == "PIPELINE_FAILURE" and message:
            failure = message
        elif last is None and message and kind not in IGNORED_EVENTS:
            last = message
    if crash is None and (failure is None or failure.startswith("This run has been marked")):
        return None
    worker = run_worker(instance, run_id)
    who = f"run worker (pid {worker[0]})" if worker else "run worker"
    cause = f"{who} {crash}" if crash is not None else failure
    return f"{cause}; its last event: {last}" if last else cause


# what says nothing of where a run was: the run's own bookkeeping
IGNORED_EVENTS = {
    "ENGINE_EVENT",
    "LOGS_CAPTURED",
    "PIPELINE_FAILURE",
    "PIPELINE_START",
    "PIPELINE_STARTING",
    "PIPELINE_ENQUEUED",
    "PIPELINE_DEQUEUED",
    "PIPELINE_CANCELED",
    "PIPELINE_CANCELING",
    "RUN_FAILURE",
}


def run_label(run) -> str:
    assets = sorted(k.to_user_string() for k in run.asset_selection or ())
    where = partition_label(run.tags)
    return "+".join(assets) + (f" [{where}]" if where else "")


def failure_message(result) -> str:
    """The user-facing error of a failed in-process run (``dg.materialize``)."""
    for event in result.all_events:
        if event.is_step_failure and event.step_failure_data is not None:
            return one_line(innermost(event.step_failure_data.error))
    return "run failed"


def materialise_in_order(
    assets: list,
    steps: list[tuple[str, object]],
    instance,
    lake,
    command: str,
    configs: dict[str, dict] | None = None,
    resources: dict | None = None,
) -> str:
    """Each ``(asset, partition)`` of ``steps`` materialised in turn, in this process, on the
    persistent ``instance`` (so its runs and checks show in the UI, tagged ``kg/command``),
    with its run config from ``configs`` (asset name -> config) and ``resources`` beside the
    ``lake`` resource; stops at the first failure and returns its one line, else ""."""
    import dagster as dg

    from kg_platform.orchestration.recovery import owner_tags

    configs = configs or {}
    for n, (asset, partition) in enumerate(steps, 1):
        # progress on stderr: stdout keeps the command's figures (a --json line last)
        print(f"[{n}/{len(steps)}] {asset} [{partition}] ...", file=sys.stderr, flush=True)
        started = time.perf_counter()
        result = dg.materialize(
            assets,
            selection=[asset],
            partition_key=partition,
            instance=instance,
            resources={"lake": lake, **(resources or {})},
            # Dagster's console log stays in the instance (and the UI): the command prints
            run_config={**QUIET, "ops": {asset: {"config": configs[asset]}}}
            if asset in configs
            else QUIET,
            tags={"kg/command": command, **owner_tags()},  # see orchestration/recovery.py
            raise_on_error=False,
        )
        if not result.success:
            return f"{asset}[{partition}] failed: {failure_message(result)}"
        checks = result.get_asset_check_evaluations()
        passed = sum(c.passed for c in checks)
        print(
            f"[{n}/{len(steps)}] {asset}: ok in {time.perf_counter() - started:.1f}s"
            + (f", checks {passed}/{len(checks)} passed" if checks else ""),
            file=sys.stderr,
            flush=True,
        )
    return ""


def execute_in_process(job, instance) -> str:
    """``job`` run in this process on ``instance``, its console log quiet and tagged with this
    process as its owner (an in-process run reports no worker pid: the tag lets the next
    build fail it, recovery.py); its failure's one line, or ""."""
    from kg_platform.orchestration.recovery import owner_tags

    result = job.execute_in_process(
        instance=instance, raise_on_error=False, run_config=QUIET, tags=owner_tags()
    )
    return "" if result.success else failure_message(result)
