"""A PubMedQA file's articles as one more corpus contribution, in the fold's table shapes.

PubMedQA (PQA-L) keys each question by the PMID of the article it was made from and carries
that article's abstract sections (``CONTEXTS`` with ``LABELS``), publication ``YEAR`` and
MeSH heading names (``MESHES``). This module turns a file of them into the per-file tables
the fold reads (``tables/<table>/<file>.parquet``, the columns of
:data:`kg_platform.schemas.ARROW_SCHEMAS`), so the articles fold beside a PubMed release and
the graph is built from both unchanged:

- ``articles``: one row per question, ``pmid`` = the key, ``version`` 1, ``file`` = the
  contribution's name, ``title`` null (PubMedQA has none), ``abstract`` = the CONTEXTS
  joined by newlines as ``LABEL: text`` (the ``Articles`` convention; ``LONG_ANSWER``, the
  conclusion that states the answer, is never read), ``year`` = YEAR (null when absent).
- ``mesh_edges``: one row per distinct resolved descriptor, no qualifier. A name is resolved
  to a descriptor UI through the MeSH term table: the heading name first, then an entry
  term, each tried as written and then normalised (``text.normalise``). NLM's display
  conventions are honoured when present: a trailing ``*`` marks a major topic
  (``descriptor_major``) and ``Name/qualifier`` is stripped to the descriptor. Names that
  resolve to no descriptor, or to more than one, are counted, never guessed.
- ``citations``, ``corrections``, ``chemicals``, ``pubtypes``, ``deletions``: empty.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import polars as pl
import pyarrow as pa

from kg_platform.schemas import ARROW_SCHEMAS
from kg_platform.text.normalise import normalise

# the kinds of mesh/terms.parquet a MESHES name may be: the heading and its entry terms
NAME_KINDS = ("name", "entry")


@dataclass(frozen=True)
class Resolution:
    ui: str | None
    major: bool
    how: str  # name, entry, name_normalised, entry_normalised, unresolved, ambiguous


class MeshNameResolver:
    """MeSH heading names (as PubMed displays them) to descriptor UIs."""

    def __init__(self, terms: pl.DataFrame) -> None:
        """``terms``: columns ``ui``, ``term``, ``kind`` and optionally ``normalised``
        (``mesh/terms.parquet``, or :func:`terms_from_descriptor_tsv`); only kinds ``name``
        and ``entry`` are used."""
        terms = terms.filter(pl.col("kind").is_in(NAME_KINDS))
        if "normalised" not in terms.columns:
            terms = terms.with_columns(
                pl.col("term").map_elements(normalise, return_dtype=pl.Utf8).alias("normalised")
            )
        self._maps: list[tuple[str, dict[str, frozenset[str]]]] = []
        for kind in NAME_KINDS:
            rows = terms.filter(pl.col("kind") == kind)
            for how, column in ((kind, "term"), (f"{kind}_normalised", "normalised")):
                grouped = rows.group_by(column).agg(pl.col("ui").unique())
                table = dict(
                    zip(
                        grouped[column].to_list(),
                        map(frozenset, grouped["ui"].to_list()),
                        strict=True,
                    )
                )
                self._maps.append((how, table))

    def resolve(self, heading: str) -> Resolution:
        text = heading.strip()
        major = text.endswith("*")
        descriptor = text.rstrip("*").strip()
        if "/" in descriptor:
            # "Name/qualifier" (or "Name/*qualifier"): the descriptor is the part before
            descriptor = descriptor.split("/", 1)[0].strip().rstrip("*").strip()
            major = major or "*" in text.split("/", 1)[0]
        if descriptor.startswith("*"):
            descriptor, major = descriptor.lstrip("*").strip(), True
        for how, table in self._maps:
            key = normalise(descriptor) if how.endswith("_normalised") else descriptor
            uis = table.get(key)
            if uis is None:
                continue
            if len(uis) == 1:
                return Resolution(next(iter(uis)), major, how)
            return Resolution(None, major, "ambiguous")
        return Resolution(None, major, "unresolved")


def terms_from_descriptor_tsv(path: str | os.PathLike[str]) -> pl.DataFrame:
    """(ui, term, kind) from the MeSH descriptors TSV: each heading and its entry terms."""
    from kg_platform.mesh.tsv import read_descriptor_tsv

    frames = read_descriptor_tsv(str(path))
    names = frames["descriptors"].select("ui", pl.col("name").alias("term"))
    entries = frames["entries"].select("ui", "term").drop_nulls()
    return pl.concat(
        [
            names.with_columns(pl.lit("name").alias("kind")),
            entries.with_columns(pl.lit("entry").alias("kind")),
        ]
    ).filter(pl.col("term").str.len_chars() > 0)


@dataclass(frozen=True)
class PubmedqaCorpus:
    """The per-file tables of one PubMedQA contribution and how its MESHES resolved."""

    file: str
    tables: dict[str, pa.Table]
    headings: int  # MESHES names read
    resolved: int
    unresolved: int  # no descriptor of this MeSH has that name or entry term
    ambiguous: int  # more than one descriptor has it
    resolved_by: dict[str, int] = field(default_factory=dict)  # name, entry, ..._normalised
    unresolved_names: tuple[str, ...] = ()  # distinct, sorted

    def summary(self) -> dict[str, object]:
        return {
            "file": self.file,
            "rows": {t: n.num_rows for t, n in self.tables.items()},
            "headings": self.headings,
            "resolved": self.resolved,
            "unresolved": self.unresolved,
            "ambiguous": self.ambiguous,
            "resolved_by": dict(self.resolved_by),
            "unresolved_names": list(self.unresolved_names),
        }


def read_pubmedqa_records(path: str | os.PathLike[str]) -> dict[str, dict]:
    records = json.loads(Path(path).read_text())
    if not isinstance(records, dict):
        raise ValueError(f"{path}: expected an object keyed by PMID")
    return records


def _abstract(record: dict, qid: str) -> str | None:
    contexts = list(record.get("CONTEXTS") or [])
    labels = list(record.get("LABELS") or [])
    if labels and len(labels) != len(contexts):
        raise ValueError(f"question {qid}: {len(contexts)} CONTEXTS but {len(labels)} LABELS")
    parts = [
        f"{label}: {text}" if label else text
        for label, text in zip(labels or [""] * len(contexts), contexts, strict=True)
    ]
    return "\n".join(parts) or None


def _year(value: object, qid: str) -> int | None:
    if value in (None, ""):
        return None
    year = int(str(value))
    if not 1000 <= year <= 2100:
        raise ValueError(f"question {qid}: YEAR {value!r} is not a publication year")
    return year


def pubmedqa_corpus(
    records: dict[str, dict],
    resolver: MeshNameResolver,
    file: str,
    pmids: Iterable[int] | None = None,
) -> PubmedqaCorpus:
    """The per-file tables of the articles behind ``records`` (a PubMedQA file's JSON),
    restricted to ``pmids`` when given, sorted by PMID."""
    keep = None if pmids is None else {int(p) for p in pmids}
    articles: dict[str, list] = {c: [] for c in ARROW_SCHEMAS["articles"].names}
    edges: dict[str, list] = {c: [] for c in ARROW_SCHEMAS["mesh_edges"].names}
    how: Counter[str] = Counter()
    missing: set[str] = set()
    for qid in sorted(records, key=int):
        pmid = int(qid)
        if keep is not None and pmid not in keep:
            continue
        record = records[qid]
        abstract = _abstract(record, qid)
        for column, value in (
            ("pmid", pmid),
            ("version", 1),
            ("file", file),
            ("title", None),
            ("abstract", abstract),
            ("has_abstract", abstract is not None),
            ("year", _year(record.get("YEAR"), qid)),
            ("journal", None),
            ("language", None),
            ("n_pubtypes", 0),
        ):
            articles[column].append(value)
        majors: dict[str, bool] = {}
        for heading in record.get("MESHES") or []:
            r = resolver.resolve(heading)
            how[r.how] += 1
            if r.ui is None:
                missing.add(heading)
                continue
            majors[r.ui] = majors.get(r.ui, False) or r.major
        for ui in sorted(majors):
            for column, value in (
                ("pmid", pmid),
                ("version", 1),
                ("descriptor_ui", ui),
                ("descriptor_major", majors[ui]),
                ("qualifier_ui", None),
                ("qualifier_major", None),
            ):
                edges[column].append(value)
    tables = {
        name: pa.Table.from_pylist([], schema=schema) for name, schema in ARROW_SCHEMAS.items()
    }
    tables["articles"] = pa.table(articles, schema=ARROW_SCHEMAS["articles"])
    tables["mesh_edges"] = pa.table(edges, schema=ARROW_SCHEMAS["mesh_edges"])
    unresolved, ambiguous = how.pop("unresolved", 0), how.pop("ambiguous", 0)
    return PubmedqaCorpus(
        file=file,
        tables=tables,
        headings=sum(how.values()) + unresolved + ambiguous,
        resolved=sum(how.values()),
        unresolved=unresolved,
        ambiguous=ambiguous,
        resolved_by=dict(sorted(how.items())),
        unresolved_names=tuple(sorted(missing)),
    )


def split_halves(records: dict[str, dict]) -> tuple[list[int], list[int]]:
    """The PMIDs sorted, cut into the first and the second half (A, B)."""
    pmids = sorted(int(k) for k in records)
    middle = len(pmids) // 2
    return pmids[:middle], pmids[middle:]
