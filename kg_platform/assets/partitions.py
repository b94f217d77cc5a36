"""The partition dimensions an operator reasons about, and how they map onto each other.

- file (``pubmed26n0001``): one NLM file; the keys are exactly the files of the recorded
  PubMed source (``kg build`` and the update sensor add them, ``kg build`` drops the keys of
  a previous source, whose tables then show as stale in ``kg status``);
- release (``pubmed26``): the file name's ``pubmedYY``; a release's assets read exactly
  its own files, through :class:`FilesOfRelease`;
- MeSH year (``2024``): the year of the MeSH source's files;
- graph build: release x MeSH year;
- question set x configuration for evaluation reports; a question set key is the file
  name's stem plus a content-hash prefix (``pqal_dev400-1a2b3c4d``).
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import TYPE_CHECKING

import dagster as dg
from dagster._core.definitions.partitions.mapping.partition_mapping import (
    UpstreamPartitionsResult,
)

from kg_platform.storage.scope import Scope

if TYPE_CHECKING:
    from dagster._core.instance import DynamicPartitionsStore

FILE_KEY = re.compile(r"^(pubmed\d{2})n\d{4}$")

pubmed_files = dg.DynamicPartitionsDefinition(name="pubmed_files")
pubmed_releases = dg.DynamicPartitionsDefinition(name="pubmed_releases")
mesh_years = dg.DynamicPartitionsDefinition(name="mesh_years")
graph_builds = dg.MultiPartitionsDefinition({"release": pubmed_releases, "mesh_year": mesh_years})
pubmedqa_sets = dg.DynamicPartitionsDefinition(name="pubmedqa_sets")
hotpotqa_sets = dg.DynamicPartitionsDefinition(name="hotpotqa_sets")
# the grounding report's configuration is the MeSH year it grounds against
grounding_evaluations = dg.MultiPartitionsDefinition(
    {"question_set": pubmedqa_sets, "mesh_year": mesh_years}
)
allocation_configurations = dg.StaticPartitionsDefinition(["matched_ceilings"])
allocation_evaluations = dg.MultiPartitionsDefinition(
    {"question_set": hotpotqa_sets, "configuration": allocation_configurations}
)


def release_of(file: str) -> str:
    """``pubmed26n0001`` -> ``pubmed26``."""
    match = FILE_KEY.match(file)
    if not match:
        raise ValueError(f"{file}: not a PubMed file key (pubmedYYnNNNN)")
    return match.group(1)


def files_of_release(files: list[str], release: str) -> list[str]:
    return sorted(_files_in(files, {release}))


def _files_in(files, releases: set[str]) -> list[str]:
    return [f for f in files if FILE_KEY.match(f) and release_of(f) in releases]


def _releases_of(files) -> set[str]:
    return {release_of(f) for f in files if FILE_KEY.match(f)}


def _keys(partitions_def, current_time, dynamic_partitions_store) -> list[str]:
    return list(
        partitions_def.get_partition_keys(
            current_time=current_time, dynamic_partitions_store=dynamic_partitions_store
        )
    )


def _subset(partitions_def, keys):
    return partitions_def.empty_subset().with_partition_keys(sorted(keys))


class FilesOfRelease(dg.PartitionMapping):
    """Each release partition (``pubmed26``) reads the file partitions named ``pubmed26n*``;
    each file feeds only its own release."""

    def validate_partition_mapping(self, upstream_partitions_def, downstream_partitions_def):
        if not isinstance(upstream_partitions_def, dg.DynamicPartitionsDefinition):
            raise dg.DagsterInvalidDefinitionError("FilesOfRelease maps from file partitions")

    def get_upstream_mapped_partitions_result_for_partitions(
        self,
        downstream_partitions_subset,
        downstream_partitions_def,
        upstream_partitions_def,
        current_time: datetime | None = None,
        dynamic_partitions_store: DynamicPartitionsStore | None = None,
    ) -> UpstreamPartitionsResult:
        files = _keys(upstream_partitions_def, current_time, dynamic_partitions_store)
        releases = set(downstream_partitions_subset.get_partition_keys())
        return UpstreamPartitionsResult(
            partitions_subset=_subset(upstream_partitions_def, _files_in(files, releases)),
            required_but_nonexistent_subset=upstream_partitions_def.empty_subset(),
        )

    def get_downstream_partitions_for_partitions(
        self,
        upstream_partitions_subset,
        upstream_partitions_def,
        downstream_partitions_def,
        current_time: datetime | None = None,
        dynamic_partitions_store: DynamicPartitionsStore | None = None,
    ):
        known = _keys(downstream_partitions_def, current_time, dynamic_partitions_store)
        releases = _releases_of(upstream_partitions_subset.get_partition_keys())
        return _subset(downstream_partitions_def, releases & set(known))

    @property
    def description(self) -> str:
        return "Each release (pubmedYY) reads the files named pubmedYYnNNNN."


class ReleaseOfFile(dg.PartitionMapping):
    """The reverse direction: a file partition reads its own release (``pubmed26n0001`` ->
    ``pubmed26``), e.g. an embedding shard reading its release's corpus."""

    def validate_partition_mapping(self, upstream_partitions_def, downstream_partitions_def):
        if not isinstance(downstream_partitions_def, dg.DynamicPartitionsDefinition):
            raise dg.DagsterInvalidDefinitionError("ReleaseOfFile maps to file partitions")

    def get_upstream_mapped_partitions_result_for_partitions(
        self,
        downstream_partitions_subset,
        downstream_partitions_def,
        upstream_partitions_def,
        current_time: datetime | None = None,
        dynamic_partitions_store: DynamicPartitionsStore | None = None,
    ) -> UpstreamPartitionsResult:
        known = set(_keys(upstream_partitions_def, current_time, dynamic_partitions_store))
        releases = _releases_of(downstream_partitions_subset.get_partition_keys())
        return UpstreamPartitionsResult(
            partitions_subset=_subset(upstream_partitions_def, releases & known),
            required_but_nonexistent_subset=_subset(upstream_partitions_def, releases - known),
        )

    def get_downstream_partitions_for_partitions(
        self,
        upstream_partitions_subset,
        upstream_partitions_def,
        downstream_partitions_def,
        current_time: datetime | None = None,
        dynamic_partitions_store: DynamicPartitionsStore | None = None,
    ):
        files = _keys(downstream_partitions_def, current_time, dynamic_partitions_store)
        releases = set(upstream_partitions_subset.get_partition_keys())
        return _subset(downstream_partitions_def, _files_in(files, releases))

    @property
    def description(self) -> str:
        return "Each file (pubmedYYnNNNN) reads its release pubmedYY."


def scope_for(context: dg.AssetExecutionContext) -> Scope:
    """The lake folders this run's partition reads and writes (kg_platform.storage.scope)."""
    partitions_def = context.assets_def.partitions_def
    key = context.partition_key
    if partitions_def == pubmed_files:
        return Scope(release=release_of(key))
    if partitions_def == pubmed_releases:
        return Scope(release=key, report=key)
    if partitions_def == mesh_years:
        return Scope(mesh_year=key, report=key)
    dims = _dims(key, partitions_def)
    release, year = dims.get("release"), dims.get("mesh_year")
    order = ("question_set", "configuration", "release", "mesh_year")
    report_parts = [dims[d] for d in order if d in dims]
    return Scope(release=release, mesh_year=year, report="/".join(report_parts))


def _dims(key, partitions_def) -> dict[str, str]:
    if isinstance(key, dg.MultiPartitionKey):
        return dict(key.keys_by_dimension)
    if isinstance(partitions_def, dg.MultiPartitionsDefinition):
        return dict(partitions_def.get_partition_key_from_str(key).keys_by_dimension)
    return {}
