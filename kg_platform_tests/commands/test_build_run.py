"""The one line `kg build` prints for a failed run, from the error Dagster records."""

from __future__ import annotations

import sys

import pytest
from dagster import DagsterSubprocessError
from dagster._utils.error import serializable_error_info_from_exc_info

from kg_platform.orchestration.executor import WorkerLost
from kg_platform.orchestration.runs import innermost, one_line


def recorded(raise_it) -> object:
    """The error as Dagster serialises it into the event log."""
    try:
        raise_it()
    except Exception:
        return serializable_error_info_from_exc_info(sys.exc_info())
    raise AssertionError("nothing raised")


def celery_failure(step_error) -> None:
    # dagster_celery.core_execution_loop's own wording and layout
    raise DagsterSubprocessError(
        "During celery execution errors occurred in workers:\n"
        f"[pubmed_xml]: {step_error.to_string()}",
        subprocess_error_infos=[step_error],
    )


def test_a_lost_celery_worker_is_named_not_the_executor_header() -> None:
    lost = recorded(
        lambda: (_ for _ in ()).throw(
            WorkerLost(
                "step pubmed_xml: celery worker w2@host stopped answering while running it "
                "(2 pings of 10 s unanswered); re-execute the run from failure"
            )
        )
    )
    error = recorded(lambda: celery_failure(lost))
    assert one_line(innermost(error)) == (
        "step pubmed_xml: celery worker w2@host stopped answering while running it "
        "(2 pings of 10 s unanswered); re-execute the run from failure"
    )


def test_another_step_error_is_prefixed_with_its_step() -> None:
    bad = recorded(lambda: (_ for _ in ()).throw(ValueError("pubmed26n1334.xml.gz: md5 mismatch")))
    error = recorded(lambda: celery_failure(bad))
    assert one_line(innermost(error)) == "pubmed_xml: pubmed26n1334.xml.gz: md5 mismatch"


@pytest.mark.parametrize(
    "message",
    ["pubmed26n1334.xml.gz: md5 mismatch", "corpus: one_row_per_pmid failed:\n 2 PMIDs twice"],
)
def test_a_domain_error_keeps_its_first_line(message) -> None:
    error = recorded(lambda: (_ for _ in ()).throw(ValueError(message)))
    assert one_line(innermost(error)) == message.splitlines()[0]


def test_file_runs_get_the_cores_over_the_runs_at_once(monkeypatch) -> None:
    """One batch of files parses on every core; two batches at once, half each; an
    operator's own KG_PARSE_WORKERS is left alone; the CLI's own environment is untouched."""
    from kg_platform.assets.build_keys import file_run_environment

    monkeypatch.delenv("KG_PARSE_WORKERS", raising=False)
    monkeypatch.setattr("kg_platform.assets.build_keys.usable_cores", lambda: 8)
    assert file_run_environment(16, 2) == {"KG_PARSE_WORKERS": "8"}  # one run of 16
    assert file_run_environment(17, 2) == {"KG_PARSE_WORKERS": "4"}  # 16 + 1: two at once
    assert file_run_environment(64, 4) == {"KG_PARSE_WORKERS": "2"}
    assert file_run_environment(64, 16) == {"KG_PARSE_WORKERS": "2"}  # 4 runs, not 16
    assert file_run_environment(0, 2) == {}
    monkeypatch.setenv("KG_PARSE_WORKERS", "3")
    assert file_run_environment(64, 2) == {}


def test_a_pinned_build_sizes_its_runs_and_parse_workers_by_its_affinity(monkeypatch) -> None:
    """Pinned to one core (taskset, a cpuset), `kg build`'s default --jobs, a file run's
    parse workers and a local Celery worker's parse processes are one, not the machine's
    cores: the affinity is what the process may use."""
    import argparse
    import os

    from kg_platform.assets.build_keys import file_run_environment
    from kg_platform.commands.build import add_parser
    from kg_platform.orchestration.deployment import parse_workers_per_step
    from kg_platform.pubmed.tables import parse_workers

    monkeypatch.delenv("KG_PARSE_WORKERS", raising=False)
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {min(before)})
    try:
        parser = argparse.ArgumentParser()
        add_parser(parser.add_subparsers())
        assert parser.parse_args(["build"]).jobs == 1
        assert file_run_environment(16, 2) == {"KG_PARSE_WORKERS": "1"}
        assert parse_workers() == 1
        assert parse_workers_per_step(1, 1) == 1
    finally:
        os.sched_setaffinity(0, before)
