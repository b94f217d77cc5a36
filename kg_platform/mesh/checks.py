"""Checks on a MeSH build: schemas, UI shape and uniqueness, tree parents, supplementary
mappings, and a recount of the source files by an independent pass.

The recount deliberately shares no code with the readers: TSVs are split line by line in
plain Python, XML is counted as byte patterns, so a reader bug cannot hide in both.
"""

from __future__ import annotations

import gzip
import re
from dataclasses import dataclass
from typing import Any

import pandera.errors
import polars as pl

from kg_platform.checks import CheckOutcome
from kg_platform.mesh.fetch import open_location
from kg_platform.mesh.source import MeshSourceSpec
from kg_platform.mesh.tables import MeshBuild, parent_tree_number
from kg_platform.schemas import (
    MESH_TABLES,
    UI_DESCRIPTOR,
    UI_QUALIFIER,
    UI_SUPPLEMENTARY,
)


@dataclass(frozen=True)
class SourceCounts:
    """Counts taken straight from the source files."""

    descriptors: int
    tree_numbers: int
    entry_terms: int
    supplementary_records: int
    # the concept-level terms (thesaurus table or descriptor XML): every term row with the
    # record-preferred one, the descriptors and concepts they name; None without such a file
    term_rows: int | None = None
    term_descriptors: int | None = None
    concepts: int | None = None

    def as_dict(self) -> dict[str, int]:
        return {
            "descriptors": self.descriptors,
            "tree_numbers": self.tree_numbers,
            "entry_terms": self.entry_terms,
            "supplementary_records": self.supplementary_records,
        }

    def terms_dict(self) -> dict[str, int | None]:
        return {
            "term_rows": self.term_rows,
            "term_descriptors": self.term_descriptors,
            "concepts": self.concepts,
        }


def recount_source(spec: MeshSourceSpec) -> SourceCounts:
    """Count records, tree numbers and entry terms in the source files themselves."""
    if spec.format == "tsv":
        descriptors = tree_numbers = entry_terms = 0
        for line in _lines(spec.descriptors):
            fields = line.split("\t")
            descriptors += 1
            if len(fields) > 3:
                tree_numbers += sum(1 for t in fields[3].split("|") if t.strip())
            if len(fields) > 2:
                entry_terms += sum(1 for t in fields[2].split("|") if t.strip())
        supplementary = sum(1 for _ in _lines(spec.supplementary)) if spec.supplementary else 0
        if spec.thesaurus is None:
            return SourceCounts(descriptors, tree_numbers, entry_terms, supplementary)
        rows, entries, term_descriptors, concepts = _recount_thesaurus(spec.thesaurus)
        return SourceCounts(
            descriptors, tree_numbers, entries, supplementary, rows, term_descriptors, concepts
        )

    record = re.compile(rb"<DescriptorRecord[\s>]")
    tree = re.compile(rb"<TreeNumber>")
    term = re.compile(rb"<Term[\s>]")
    preferred = re.compile(rb'RecordPreferredTermYN\s*=\s*"Y"')
    concept = re.compile(rb"<Concept[\s>]")  # not <ConceptList>, <ConceptUI>, ...
    counts = _count_patterns(spec.descriptors, [record, tree, term, preferred, concept])
    supplementary = 0
    if spec.supplementary:
        supplementary = _count_patterns(
            spec.supplementary, [re.compile(rb"<SupplementalRecord[\s>]")]
        )[0]
    return SourceCounts(
        counts[0], counts[1], counts[2] - counts[3], supplementary, counts[2], counts[0], counts[4]
    )


def _recount_thesaurus(location: str) -> tuple[int, int, int, int]:
    """(term rows, entry terms, descriptors, concepts) of the thesaurus table, by header
    name and plain line splitting."""
    lines = _lines(location)
    header = next(lines).rstrip("\n").split("\t")
    at = {name: header.index(name) for name in ("DescriptorUI", "ConceptUI")}
    preferred_at = header.index("RecordPreferredTermYN")
    rows = entries = 0
    descriptors: set[str] = set()
    concepts: set[str] = set()
    for line in lines:
        fields = line.rstrip("\n").split("\t")
        rows += 1
        entries += fields[preferred_at] != "Y"
        descriptors.add(fields[at["DescriptorUI"]])
        concepts.add(fields[at["ConceptUI"]])
    return rows, entries, len(descriptors), len(concepts)


def _lines(location: str | None):
    """Non-empty lines of a (gzipped) text file, decoded."""
    assert location is not None
    if location.endswith(".gz") and not location.startswith(("http://", "https://")):
        with gzip.open(location, "rt", encoding="utf-8") as f:
            yield from (line for line in f if line.strip())
        return
    with open_location(location) as stream:
        for raw in stream:
            if raw.strip():
                yield raw.decode("utf-8")


def _count_patterns(location: str, patterns: list[re.Pattern[bytes]]) -> list[int]:
    """Occurrences of each tag pattern, streaming in chunks.

    Every pattern holds exactly one '<', at its start, so a match never spans a '<': counting
    up to the last '<' of the buffer and carrying the rest over is exact.
    """
    counts = [0] * len(patterns)
    carry = b""
    with open_location(location) as stream:
        while chunk := stream.read(1 << 22):
            buffer = carry + chunk
            cut = buffer.rfind(b"<")
            if cut <= 0:
                carry = buffer
                continue
            head, carry = buffer[:cut], buffer[cut:]
            for i, pattern in enumerate(patterns):
                counts[i] += len(pattern.findall(head))
    for i, pattern in enumerate(patterns):
        counts[i] += len(pattern.findall(carry))
    return counts


def check_mesh_build(build: MeshBuild, recount: SourceCounts | None) -> list[CheckOutcome]:
    """Every check of the mesh_tables asset, in `contracts.CHECKS` order."""
    frames = {name: pl.from_arrow(table) for name, table in build.tables.items()}
    outcomes = [_schema_check(name, frames[name]) for name in MESH_TABLES]
    outcomes.append(_ui_check(frames))
    outcomes.append(_tree_parent_check(frames["tree"]))
    outcomes.append(_supplementary_check(frames, build))
    outcomes.append(_recount_check(frames, build, recount))
    outcomes.append(_terms_recount_check(frames["terms"], recount))
    outcomes.append(_terms_descriptors_check(frames))
    return outcomes


def _schema_check(name: str, frame: pl.DataFrame) -> CheckOutcome:
    try:
        MESH_TABLES[name].validate(frame, lazy=True)  # type: ignore[attr-defined]
    except (pandera.errors.SchemaErrors, pandera.errors.SchemaError) as exc:
        return CheckOutcome(
            f"{name}_schema", False, metadata={"rows": frame.height, "error": str(exc)[:2000]}
        )
    return CheckOutcome(f"{name}_schema", True, metadata={"rows": frame.height})


def _malformed(series: pl.Series, pattern: str) -> int:
    return int((~series.str.contains(pattern)).sum())


def _ui_check(frames: dict[str, pl.DataFrame]) -> CheckOutcome:
    descriptors, qualifiers = frames["descriptors"]["ui"], frames["qualifiers"]["ui"]
    known = frames["descriptors"].select("ui")
    problems = {
        "malformed_descriptor_uis": _malformed(descriptors, UI_DESCRIPTOR),
        "duplicate_descriptor_uis": descriptors.len() - descriptors.n_unique(),
        "malformed_qualifier_uis": _malformed(qualifiers, UI_QUALIFIER),
        "duplicate_qualifier_uis": qualifiers.len() - qualifiers.n_unique(),
        "malformed_supplementary_uis": _malformed(
            frames["scr_aliases"]["scr_ui"], UI_SUPPLEMENTARY
        ),
        "duplicate_tree_numbers": frames["tree"].height - frames["tree"]["tree_number"].n_unique(),
        "tree_rows_unknown_descriptor": frames["tree"].join(known, on="ui", how="anti").height,
        "term_rows_unknown_descriptor": frames["terms"].join(known, on="ui", how="anti").height,
        "allowable_rows_unknown_descriptor": frames["allowable"]
        .join(known, left_on="descriptor_ui", right_on="ui", how="anti")
        .height,
    }
    return CheckOutcome("uis_well_formed_unique", not any(problems.values()), metadata=problems)


def _tree_parent_check(tree: pl.DataFrame) -> CheckOutcome:
    parents = tree.select("tree_number", parent_tree_number(pl.col("tree_number")).alias("parent"))
    roots = parents.filter(pl.col("parent").is_null())
    orphans = parents.drop_nulls("parent").join(
        tree.select(pl.col("tree_number").alias("parent")), on="parent", how="anti"
    )
    metadata: dict[str, Any] = {
        "tree_numbers": tree.height,
        "category_roots": roots.height,
        "missing_parents": orphans.height,
    }
    if orphans.height:
        metadata["examples"] = orphans["tree_number"].head(10).to_list()
    return CheckOutcome("tree_parents_exist", orphans.height == 0, metadata=metadata)


def _supplementary_check(frames: dict[str, pl.DataFrame], build: MeshBuild) -> CheckOutcome:
    known = frames["descriptors"].select("ui")
    unknown_written = (
        frames["scr_aliases"].join(known, left_on="heading_ui", right_on="ui", how="anti").height
    )
    metadata = {
        "dangling_mappings_dropped": build.stats.scr_dangling_mappings,
        "aliases_to_unknown_descriptor_written": unknown_written,
        "scr_aliases": frames["scr_aliases"].height,
    }
    return CheckOutcome("supplementary_mappings_known", unknown_written == 0, metadata=metadata)


def _recount_check(
    frames: dict[str, pl.DataFrame], build: MeshBuild, recount: SourceCounts | None
) -> CheckOutcome:
    written = {
        "descriptors": frames["descriptors"].height,
        "tree_numbers": frames["tree"].height,
        "entry_terms": frames["terms"].filter(pl.col("kind") == "entry").height,
        "supplementary_records": build.n_supplementary,
    }
    if recount is None:
        return CheckOutcome(
            "recount_matches_source", False, metadata={"written": written, "error": "no recount"}
        )
    source = recount.as_dict()
    mismatched = sorted(k for k in written if written[k] != source[k])
    metadata: dict[str, Any] = {f"written_{k}": v for k, v in written.items()}
    metadata.update({f"source_{k}": v for k, v in source.items()})
    metadata["mismatched"] = ", ".join(mismatched) or "none"
    return CheckOutcome("recount_matches_source", not mismatched, metadata=metadata)


def _terms_recount_check(terms: pl.DataFrame, recount: SourceCounts | None) -> CheckOutcome:
    """The thesaurus's own rows (names and entry terms with a term UI), descriptors and
    concepts, against an independent count of the file."""
    from_source = terms.filter(
        pl.col("kind").is_in(["name", "entry"]) & pl.col("term_ui").is_not_null()
    )
    written = {
        "term_rows": from_source.height,
        "term_descriptors": from_source["ui"].n_unique(),
        "concepts": from_source["concept_ui"].n_unique(),
    }
    if recount is None:
        return CheckOutcome(
            "terms_recount_matches_source", False, metadata={**written, "error": "no recount"}
        )
    source = recount.terms_dict()
    metadata: dict[str, Any] = {f"written_{k}": v for k, v in written.items()}
    if source["term_rows"] is None:
        # a bare-string source (descriptors TSV alone) has no concept-level terms to count
        metadata["note"] = "the source has no concept-level terms"
        return CheckOutcome(
            "terms_recount_matches_source", written["term_rows"] == 0, metadata=metadata
        )
    metadata.update({f"source_{k}": v for k, v in source.items()})
    mismatched = sorted(k for k in written if written[k] != source[k])
    metadata["mismatched"] = ", ".join(mismatched) or "none"
    return CheckOutcome("terms_recount_matches_source", not mismatched, metadata=metadata)


def _terms_descriptors_check(frames: dict[str, pl.DataFrame]) -> CheckOutcome:
    """Every term names a descriptor of this build (the thesaurus is a second file: its
    descriptors must be the descriptor TSV's)."""
    unknown = frames["terms"].join(frames["descriptors"].select("ui"), on="ui", how="anti")
    metadata: dict[str, Any] = {
        "terms": frames["terms"].height,
        "terms_unknown_descriptor": unknown.height,
    }
    if unknown.height:
        metadata["examples"] = unknown["ui"].unique().sort().head(10).to_list()
    return CheckOutcome("terms_descriptors_known", unknown.height == 0, metadata=metadata)
