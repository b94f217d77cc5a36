"""Pandera (polars) models, one per table. They are the contract between stages.

Per-file tables (``tables/<table>/<file>.parquet``) and the folded corpus
(``corpus/<table>.parquet``) share the same columns. Child tables carry ``version`` so the
fold can keep exactly the rows of the record version that wins.

These models are the one declaration of each table's columns: the parser's Arrow schemas
(:data:`ARROW_SCHEMAS`, via :func:`arrow_schema`) and the column descriptions shown in the
UI (:func:`columns`) are derived from them. Import them from :mod:`kg_platform.schemas`,
which loads this module (and pandera) on first use.
"""

from __future__ import annotations

import pandera.polars as pa
import polars as pl
import pyarrow

from kg_platform.schemas import UI_DESCRIPTOR, UI_QUALIFIER, UI_SUPPLEMENTARY

_PMID = "PubMed identifier of the record"
_VERSION = "PMID Version attribute of the record (1 when absent)"


class _Table(pa.DataFrameModel):
    """Every table: strict, no column beyond those its model declares."""

    class Config:
        strict = True


class _PerRecord(_Table):
    """A table of PubMed records, keyed by the record's PMID and version (first columns)."""

    pmid: pl.Int64 = pa.Field(gt=0, description=_PMID)
    version: pl.Int32 = pa.Field(ge=1, description=_VERSION)


class Articles(_PerRecord):
    """One row per PubMed record (``PubmedArticle`` or legacy ``MedlineCitation``)."""

    file: pl.Utf8 = pa.Field(
        description="Key of the NLM file the record was read from, e.g. pubmed26n1334; "
        "in the corpus, the file whose record won the fold"
    )
    title: pl.Utf8 = pa.Field(
        nullable=True, description="ArticleTitle text, inline markup flattened"
    )
    abstract: pl.Utf8 = pa.Field(
        nullable=True,
        description="AbstractText sections joined by newlines as 'LABEL: text' "
        "(OtherAbstract translations excluded)",
    )
    has_abstract: pl.Boolean = pa.Field(description="True when abstract is not null")
    year: pl.Int32 = pa.Field(
        nullable=True,
        ge=1000,
        le=2100,
        description="Journal issue PubDate year (first year of a MedlineDate)",
    )
    journal: pl.Utf8 = pa.Field(nullable=True, description="Journal Title")
    language: pl.Utf8 = pa.Field(nullable=True, description="First Language code, e.g. eng")
    n_pubtypes: pl.Int32 = pa.Field(ge=0, description="Number of PublicationType elements")

    class Config:
        unique = ["pmid", "version"]


class MeshEdges(_PerRecord):
    """One row per MeshHeading without qualifiers, else one per heading/qualifier pair."""

    descriptor_ui: pl.Utf8 = pa.Field(
        str_matches=UI_DESCRIPTOR, description="MeSH descriptor UI (DescriptorName UI)"
    )
    descriptor_major: pl.Boolean = pa.Field(
        description="Descriptor is a major topic (MajorTopicYN='Y')"
    )
    qualifier_ui: pl.Utf8 = pa.Field(
        nullable=True,
        str_matches=UI_QUALIFIER,
        description="MeSH qualifier UI (QualifierName UI); null for a heading without qualifiers",
    )
    qualifier_major: pl.Boolean = pa.Field(
        nullable=True,
        description="Qualifier is a major topic (MajorTopicYN='Y'); null without qualifier",
    )


class Citations(_Table):
    """One row per distinct PMID cited in the record's ReferenceList elements."""

    citing_pmid: pl.Int64 = pa.Field(gt=0, description="PMID of the citing record")
    version: pl.Int32 = pa.Field(ge=1, description=_VERSION)
    cited_pmid: pl.Int64 = pa.Field(
        gt=0, description="Cited PMID (a reference's ArticleId IdType='pubmed')"
    )


class Corrections(_PerRecord):
    """One row per CommentsCorrections element (errata, comments, retractions, ...)."""

    ref_type: pl.Utf8 = pa.Field(
        description="RefType attribute, e.g. ErratumIn, CommentOn ('' when absent)"
    )
    ref_pmid: pl.Int64 = pa.Field(
        nullable=True, gt=0, description="PMID of the referenced record; null when not given"
    )


class Chemicals(_PerRecord):
    """One row per Chemical in the record's ChemicalList."""

    registry_number: pl.Utf8 = pa.Field(
        nullable=True, description="RegistryNumber (CAS, EC or '0' when NLM has none)"
    )
    substance_ui: pl.Utf8 = pa.Field(
        nullable=True, description="MeSH UI of NameOfSubstance (descriptor D... or SCR C...)"
    )
    substance_name: pl.Utf8 = pa.Field(description="NameOfSubstance text ('' when absent)")


class Pubtypes(_PerRecord):
    """One row per PublicationType of the record, in NLM's order."""

    pubtype_ui: pl.Utf8 = pa.Field(nullable=True, description="PublicationType UI, e.g. D016428")
    name: pl.Utf8 = pa.Field(description="PublicationType text, e.g. Journal Article")


class Deletions(_Table):
    """The distinct PMIDs a file's DeleteCitation lists (per-file tables only)."""

    pmid: pl.Int64 = pa.Field(gt=0, description="PMID deleted by this file")

    class Config:
        unique = ["pmid"]


PUBMED_TABLES: dict[str, type[pa.DataFrameModel]] = {
    "articles": Articles,
    "mesh_edges": MeshEdges,
    "citations": Citations,
    "corrections": Corrections,
    "chemicals": Chemicals,
    "pubtypes": Pubtypes,
    "deletions": Deletions,
}

# the corpus holds the current state: the same tables minus deletions (each table's PMID
# column is kg_platform.pubmed.fold.CORPUS_TABLES)
CORPUS_MODELS: dict[str, type[pa.DataFrameModel]] = {
    k: v for k, v in PUBMED_TABLES.items() if k != "deletions"
}


# -- MeSH (mesh/<table>.parquet) ------------------------------------------------------------
MESH_TREE_NUMBER = r"^[A-Z]\d{2}(\.\d{3})*$"
MESH_TERM_KINDS = ["name", "entry", "deinverted", "scr_alias"]
MESH_LEXICAL_TAGS = ["NON", "ABB", "ABX", "ACR", "ACX", "EPO", "LAB", "NAM", "TRD", "HIST"]


class MeshDescriptors(_Table):
    """One row per MeSH descriptor record."""

    ui: pl.Utf8 = pa.Field(
        str_matches=UI_DESCRIPTOR, unique=True, description="Descriptor UI, e.g. D009203"
    )
    name: pl.Utf8 = pa.Field(
        str_length={"min_value": 1}, description="DescriptorName (preferred heading)"
    )
    # sorted distinct tree letters, e.g. ["C"] for Myocardial Infarction; empty without trees
    categories: pl.List(pl.Utf8) = pa.Field(
        description="Sorted distinct first letters of its tree numbers; empty without trees"
    )
    min_depth: pl.Int32 = pa.Field(
        nullable=True,
        ge=1,
        description="Depth of its shallowest tree number (C14 = 1); null without trees",
    )
    n_trees: pl.Int32 = pa.Field(ge=0, description="Number of tree numbers")


class MeshTree(_Table):
    """One row per tree number (a descriptor's place in the MeSH hierarchy)."""

    ui: pl.Utf8 = pa.Field(str_matches=UI_DESCRIPTOR, description="Descriptor UI")
    tree_number: pl.Utf8 = pa.Field(
        str_matches=MESH_TREE_NUMBER, unique=True, description="Tree number, e.g. C14.280.647"
    )


class MeshBroader(_Table):
    """Distinct descriptor pairs where a parent tree number is one step above a child's."""

    child_ui: pl.Utf8 = pa.Field(str_matches=UI_DESCRIPTOR, description="Narrower descriptor UI")
    parent_ui: pl.Utf8 = pa.Field(
        str_matches=UI_DESCRIPTOR,
        description="Descriptor UI owning the parent of one of the child's tree numbers",
    )

    class Config:
        unique = ["child_ui", "parent_ui"]


class MeshAllowable(_Table):
    """Qualifiers allowed with each descriptor (AllowableQualifier)."""

    descriptor_ui: pl.Utf8 = pa.Field(str_matches=UI_DESCRIPTOR, description="Descriptor UI")
    qualifier_ui: pl.Utf8 = pa.Field(str_matches=UI_QUALIFIER, description="Allowable qualifier UI")

    class Config:
        unique = ["descriptor_ui", "qualifier_ui"]


class MeshTerms(_Table):
    """Surface forms the grounder matches, each naming one descriptor."""

    ui: pl.Utf8 = pa.Field(str_matches=UI_DESCRIPTOR, description="Descriptor UI the term names")
    term: pl.Utf8 = pa.Field(str_length={"min_value": 1}, description="Term as written")
    normalised: pl.Utf8 = pa.Field(
        str_length={"min_value": 1},
        description="kg_platform.text.normalise.normalise(term), the matched form",
    )
    kind: pl.Utf8 = pa.Field(
        isin=MESH_TERM_KINDS,
        description="name (heading), entry (entry term), deinverted (natural order of an "
        "inverted term) or scr_alias (supplementary record alias)",
    )
    concept_ui: pl.Utf8 = pa.Field(
        nullable=True,
        str_matches=r"^M\d{7,9}$",
        description="ConceptUI of the concept holding the term, e.g. M0353609; null for "
        "supplementary aliases and where the source lists bare strings (descriptors TSV)",
    )
    term_ui: pl.Utf8 = pa.Field(
        nullable=True,
        str_matches=r"^T\d{6,9}$",
        description="TermUI (a permuted variant shares its term's UI); null as concept_ui",
    )
    concept_preferred: pl.Boolean = pa.Field(
        nullable=True,
        description="ConceptPreferredTermYN: the term is its concept's preferred term; null "
        "for de-inverted forms, supplementary aliases and bare-string sources",
    )
    permuted: pl.Boolean = pa.Field(
        nullable=True,
        description="IsPermutedTermYN: a word-order or inflection variant NLM generated "
        "from another term of the concept; null as concept_preferred",
    )
    lexical_tag: pl.Utf8 = pa.Field(
        nullable=True,
        isin=MESH_LEXICAL_TAGS,
        description="LexicalTag: NON (ordinary), ABB/ABX (abbreviation), ACR/ACX (acronym), "
        "EPO (eponym), LAB (lab number), NAM (proper name), TRD (trade name), HIST; null "
        "as concept_ui",
    )


class MeshQualifiers(_Table):
    """One row per MeSH qualifier (subheading) record."""

    ui: pl.Utf8 = pa.Field(
        str_matches=UI_QUALIFIER, unique=True, description="Qualifier UI, e.g. Q000097"
    )
    name: pl.Utf8 = pa.Field(str_length={"min_value": 1}, description="QualifierName")
    abbreviation: pl.Utf8 = pa.Field(
        nullable=True,
        str_matches=r"^[A-Z]{2}$",
        description="Two-letter abbreviation, e.g. BL; null where the source gives none",
    )


class MeshScrAliases(_Table):
    """Supplementary-record names kept as aliases of the descriptors they map to."""

    scr_ui: pl.Utf8 = pa.Field(
        str_matches=UI_SUPPLEMENTARY, description="Supplementary concept record UI, e.g. C000657245"
    )
    surface: pl.Utf8 = pa.Field(
        str_length={"min_value": 8},
        description="Record name or synonym (at least 8 characters, claimed by no descriptor)",
    )
    heading_ui: pl.Utf8 = pa.Field(
        str_matches=UI_DESCRIPTOR, description="HeadingMappedTo descriptor UI"
    )

    class Config:
        unique = ["scr_ui", "surface", "heading_ui"]


MESH_TABLES: dict[str, type] = {
    "descriptors": MeshDescriptors,
    "tree": MeshTree,
    "broader": MeshBroader,
    "allowable": MeshAllowable,
    "terms": MeshTerms,
    "qualifiers": MeshQualifiers,
    "scr_aliases": MeshScrAliases,
}


# -- derived views: Arrow schemas and column descriptions ------------------------------------
_ARROW_TYPES: dict[type[pl.DataType], pyarrow.DataType] = {
    pl.Int8: pyarrow.int8(),
    pl.Int16: pyarrow.int16(),
    pl.Int32: pyarrow.int32(),
    pl.Int64: pyarrow.int64(),
    pl.UInt8: pyarrow.uint8(),
    pl.UInt16: pyarrow.uint16(),
    pl.UInt32: pyarrow.uint32(),
    pl.UInt64: pyarrow.uint64(),
    pl.Float32: pyarrow.float32(),
    pl.Float64: pyarrow.float64(),
    pl.Boolean: pyarrow.bool_(),
    pl.String: pyarrow.string(),  # pl.Utf8 is an alias of pl.String
    pl.Date: pyarrow.date32(),
}


def _arrow_type(dtype: pl.DataType) -> pyarrow.DataType:
    if isinstance(dtype, pl.List):
        return pyarrow.list_(_arrow_type(dtype.inner))
    if isinstance(dtype, pl.Datetime):
        return pyarrow.timestamp(dtype.time_unit or "us", dtype.time_zone)
    arrow = _ARROW_TYPES.get(dtype.base_type())
    if arrow is None:
        raise TypeError(f"no Arrow type for polars dtype {dtype!r}")
    return arrow


def _fields(model: type[pa.DataFrameModel]) -> list[tuple[str, pl.DataType, str]]:
    """(name, polars dtype, description) per column, in declaration order."""
    schema = model.to_schema()
    return [
        (name, column.dtype.type, column.description or "")
        for name, column in schema.columns.items()
    ]


def arrow_schema(model: type[pa.DataFrameModel]) -> pyarrow.Schema:
    """The Arrow schema of a model's table: its columns in declaration order, every field
    nullable (Arrow's default, as the parser has always written them), no metadata."""
    return pyarrow.schema([(name, _arrow_type(dtype)) for name, dtype, _ in _fields(model)])


def _type_name(arrow: pyarrow.DataType) -> str:
    if pyarrow.types.is_list(arrow):
        return f"list<{_type_name(arrow.value_type)}>"
    return str(arrow)


def columns(model: type[pa.DataFrameModel]) -> list[tuple[str, str, str]]:
    """(name, type name, description) per column in declaration order; the type name is the
    Arrow type's (int64, int32, string, bool, list<string>, ...)."""
    return [
        (name, _type_name(_arrow_type(dtype)), description)
        for name, dtype, description in _fields(model)
    ]


# the parser's Arrow schema per PubMed per-file table, keyed as PUBMED_TABLES
ARROW_SCHEMAS: dict[str, pyarrow.Schema] = {
    name: arrow_schema(model) for name, model in PUBMED_TABLES.items()
}
