"""A build's partition keys: the files of its source, its release and MeSH year, and the
question sets its reports read, per partitions definition (what `kg build` requests of each
asset, orchestration/freshness.py drops what is fresh), added to the instance's partitions."""

from __future__ import annotations

import os
from dataclasses import dataclass

import dagster as dg

from kg_platform.assets import partitions as p
from kg_platform.orchestration.runs import FileRuns
from kg_platform.settings import PARSE_WORKERS_ENV, reference_data_dir, usable_cores


@dataclass(frozen=True)
class BuildKeys:
    """The partitions this build materialises, per dimension."""

    files: list[str]
    release: str
    mesh_year: str
    pubmedqa_sets: list[str]
    hotpotqa_sets: list[str]

    def for_partitions(self, partitions_def) -> list:
        """This build's keys of one partitions definition ([None] when unpartitioned)."""
        d = partitions_def
        if d is None:
            return [None]
        if d == p.pubmed_files:
            return list(self.files)
        if d == p.pubmed_releases:
            return [self.release]
        if d == p.mesh_years:
            return [self.mesh_year]
        if d in (p.reader_configs, p.answering_evaluations):
            # reader configurations and their caches are registered by `kg eval pubmedqa`
            return []
        if d in (
            p.verifier_configs,
            p.scifact_claim_sets,
            p.scifact_heldout_sets,
            p.refusal_evaluations,
        ):
            # verifiers train on request only: their configurations, claim sets and ladder
            # configurations are registered by whoever asks for them, never by a build
            return []
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


# the assets one step materialises for a range of files (assets/pubmed.py), reported per file
FILE_RUNS = FileRuns(frozenset({"pubmed_xml", "pubmed_tables"}), p.pubmed_files.name)


# the reference question sets the evaluation reports read (under KG_REFERENCE_DATA)
PUBMEDQA_DEV = "pubmedqa/pqal_dev400.json"
HOTPOTQA_DEV = "hotpotqa/hotpot_dev_distractor_first60.json"


def register_question_sets(lake, selected: set) -> tuple[list[str], list[str]]:
    """The reference question sets the selected reports read, copied into the lake."""
    from kg_platform.evaluation.common.question_sets import register_question_set

    pubmedqa, hotpotqa = [], []
    base = reference_data_dir()
    if dg.AssetKey("grounding_report") in selected:
        pubmedqa.append(register_question_set(lake, "pubmedqa", base / PUBMEDQA_DEV))
    if dg.AssetKey("allocation_report") in selected:
        hotpotqa.append(register_question_set(lake, "hotpotqa", base / HOTPOTQA_DEV))
    return pubmedqa, hotpotqa


def build_selection(select: str | None) -> tuple[dg.AssetSelection, list[str]]:
    """The assets a build materialises: ``select`` (a Dagster selection string), else all of
    them less the evaluation reports without reference data and the dense layer without a
    GPU, with a line saying each left out."""
    from kg_platform.orchestration.deployment import gpu_present

    if select:
        return dg.AssetSelection.from_string(select), []
    selection, skipped = dg.AssetSelection.all(), []
    if not reference_data_dir().exists():
        # evaluation reports read the reference question sets, not the sources
        skipped.append(f"no reference data at {reference_data_dir()}: skipping evaluation reports")
        selection = selection - dg.AssetSelection.groups("evaluation")
    if not gpu_present():
        skipped.append(
            "no GPU: skipping the dense layer (embeddings); add it with --select 'group:embeddings'"
        )
        selection = selection - dg.AssetSelection.groups("embeddings")
    return selection, skipped


def file_run_environment(n_files: int, jobs: int) -> dict[str, str]:
    """What the code server and its runs get for this build's file runs: as many parse
    processes per run as the cores over the runs that will run at once (a build of one batch
    parses on every core; ``jobs`` batches at once, one core each). An operator's own
    KG_PARSE_WORKERS wins."""
    from kg_platform.assets.pubmed import FILES_PER_RUN

    if PARSE_WORKERS_ENV in os.environ or not n_files:
        return {}
    at_once = max(1, min(jobs, -(-n_files // FILES_PER_RUN)))
    return {PARSE_WORKERS_ENV: str(max(1, usable_cores() // at_once))}
