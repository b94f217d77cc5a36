"""A build's partition keys: the files of its source, its release and MeSH year, and the
question sets its reports read, per partitions definition (what `kg build` requests of each
asset, orchestration/freshness.py drops what is fresh), added to the instance's partitions."""

from __future__ import annotations

from dataclasses import dataclass

import dagster as dg

from kg_platform.assets import partitions as p
from kg_platform.orchestration.runs import FileRuns


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
