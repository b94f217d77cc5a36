"""Update ingestion: a sensor that turns new NLM files into `pubmed_files` partitions and
runs, and a daily schedule that refolds the corpus once every file is parsed."""

from __future__ import annotations

import json

import dagster as dg

from kg_platform.assets.partitions import (
    files_of_release,
    pubmed_files,
    pubmed_releases,
    release_of,
)
from kg_platform.pubmed.source import SourceFile, current_release
from kg_platform.resources.pubmed_source import PubmedSourceResource

FILE_JOB = "pubmed_file_job"  # defined beside the assets in kg_platform/assets/pubmed.py
CORPUS_JOB = "pubmed_corpus_job"


def files_to_track(listed: list[SourceFile]) -> list[SourceFile]:
    """The current release and anything newer (a new baseline still being posted, which the
    fold switches to once complete). Older releases are superseded and never added."""
    if not listed:
        return []
    release = current_release(listed)
    oldest = release[0].release if release else max(f.release for f in listed)
    return [f for f in listed if f.release >= oldest]


def read_cursor(cursor: str | None) -> set[str]:
    if not cursor:
        return set()
    return set(json.loads(cursor).get("requested", []))


def write_cursor(requested: set[str], tracked: list[SourceFile]) -> str:
    # only names still tracked are kept, so the cursor shrinks when a new release takes over
    names = {f.name for f in tracked}
    return json.dumps({"requested": sorted(requested & names)}, separators=(",", ":"))


@dg.sensor(
    job_name=FILE_JOB,
    minimum_interval_seconds=60 * 60,
    default_status=dg.DefaultSensorStatus.STOPPED,
)
def pubmed_new_files(
    context: dg.SensorEvaluationContext, pubmed_source: PubmedSourceResource
) -> dg.SensorResult | dg.SkipReason:
    """Lists NLM's baseline/ and updatefiles/ hourly; each file not seen before becomes a
    `pubmed_files` partition and one run of pubmed_file_job (run key = file name)."""
    tracked = files_to_track(pubmed_source.get().list_files())
    # files parsed by `kg build` or a backfill count as seen: no second run for them
    parsed = context.instance.get_materialized_partitions(dg.AssetKey("pubmed_tables"))
    requested = read_cursor(context.cursor) | (set(parsed) & {f.name for f in tracked})
    new = [f for f in tracked if f.name not in requested]
    if not new:
        return dg.SkipReason(f"no new files among {len(tracked)} listed")
    known = set(context.instance.get_dynamic_partitions(pubmed_files.name))
    to_add = [f.name for f in new if f.name not in known]
    releases = set(context.instance.get_dynamic_partitions(pubmed_releases.name))
    new_releases = sorted({release_of(n) for n in to_add} - releases)
    requests = [pubmed_files.build_add_request(to_add)] if to_add else []
    if new_releases:
        requests.append(pubmed_releases.build_add_request(new_releases))
    return dg.SensorResult(
        run_requests=[
            dg.RunRequest(run_key=f.name, partition_key=f.name, tags={"pubmed/sub_dir": f.sub_dir})
            for f in new
        ],
        dynamic_partitions_requests=requests,
        cursor=write_cursor(requested | {f.name for f in new}, tracked),
    )


pubmed_corpus_job = dg.define_asset_job(
    CORPUS_JOB,
    selection=dg.AssetSelection.assets("corpus"),
    partitions_def=pubmed_releases,
    description="Fold every parsed file of a release into corpus/<release>/.",
)


@dg.schedule(
    job=pubmed_corpus_job,
    cron_schedule="0 9 * * *",
    execution_timezone="UTC",
    default_status=dg.DefaultScheduleStatus.STOPPED,
)
def pubmed_daily_fold(context: dg.ScheduleEvaluationContext) -> dg.RunRequest | dg.SkipReason:
    """Daily, after NLM posts its update file (overnight US Eastern): refold the newest
    release's corpus when every file of it has its tables, otherwise say which are missing."""
    all_names = context.instance.get_dynamic_partitions(pubmed_files.name)
    if not all_names:
        return dg.SkipReason("no pubmed_files partitions yet; start the pubmed_new_files sensor")
    release = max(release_of(n) for n in all_names)
    names = files_of_release(list(all_names), release)
    parsed = context.instance.get_materialized_partitions(dg.AssetKey("pubmed_tables"))
    waiting = sorted(set(names) - set(parsed))
    if waiting:
        return dg.SkipReason(
            f"{release}: {len(waiting)} of {len(names)} files not parsed yet "
            f"(first: {', '.join(waiting[:5])})"
        )
    day = context.scheduled_execution_time.strftime("%Y-%m-%d")
    return dg.RunRequest(run_key=f"corpus-{release}-{day}-{len(names)}", partition_key=release)


defs = dg.Definitions(
    sensors=[pubmed_new_files], schedules=[pubmed_daily_fold], jobs=[pubmed_corpus_job]
)
