"""The release fold: every file of a release, in order, into the current state of PubMed.

Rules (NLM's): files are applied in order, baseline before updates. Per PMID the record from
the latest file wins, and within that file the highest ``Version``. A ``DeleteCitation`` in
a file later than the PMID's last record removes the PMID (a record re-issued after its
deletion comes back). Child rows (MeSH edges, citations, ...) are kept only for the winning
(pmid, version, file), so a revised record never mixes with rows of its older version.

The fold runs in DuckDB over the per-file Parquet tables (``full``); :func:`recount_fold_polars`
(``recount``) is a separate Polars implementation of the same rules that the corpus checks
(``checks``) compare against.

A daily update does not refold the release: when the lake holds the fold of the files before
it (``corpus/fold/``, ``manifest``: the files, an identity of their tables, the DeleteCitation
state), :func:`fold_new_files` (``incremental``) streams the previous corpus through,
replacing the PMIDs the new files touch. Its parts (written by ``parts``) are byte for byte
those of a full fold (``KG_FOLD_FULL=1`` forces one), and the corpus check refolds a sample
of PMID windows from every file to show it.

The modules import downwards only (.importlinter): checks > full > incremental >
{manifest | parts | recount} > base. The package re-exports the names its callers use.
"""

from kg_platform.pubmed.fold.base import (
    FoldResult,
    PmidMap,
    PmidSet,
    table_key,
)
from kg_platform.pubmed.fold.checks import (
    check_edge_sources_in_articles,
    check_incremental_sample,
    check_no_deleted_pmid,
    check_one_row_per_pmid,
    check_recount,
    checked_parts,
    fold_checks,
)
from kg_platform.pubmed.fold.full import (
    FOLD_MEMORY_LIMIT_ENV,
    fold_memory_limit,
    fold_release,
)
from kg_platform.pubmed.fold.manifest import (
    ADDED_TABLES,
    FOLD_DELETIONS,
    FOLD_MANIFEST,
    FOLD_TOUCHED,
    FULL_FOLD_ENV,
    REPLACED_TABLES,
    added_key,
    corpus_version,
    parts_problem,
    replaced_key,
)
from kg_platform.pubmed.fold.parts import ARTICLE_ROW_GROUP_ROWS
from kg_platform.pubmed.fold.recount import (
    files_holding,
    recount_fold_polars,
)
from kg_platform.storage.corpus import CORPUS_TABLES

__all__ = [
    "ADDED_TABLES",
    "ARTICLE_ROW_GROUP_ROWS",
    "CORPUS_TABLES",
    "FOLD_DELETIONS",
    "FOLD_MANIFEST",
    "FOLD_MEMORY_LIMIT_ENV",
    "FOLD_TOUCHED",
    "FULL_FOLD_ENV",
    "REPLACED_TABLES",
    "FoldResult",
    "PmidMap",
    "PmidSet",
    "added_key",
    "check_edge_sources_in_articles",
    "check_incremental_sample",
    "check_no_deleted_pmid",
    "check_one_row_per_pmid",
    "check_recount",
    "checked_parts",
    "corpus_version",
    "files_holding",
    "fold_checks",
    "fold_memory_limit",
    "fold_release",
    "parts_problem",
    "recount_fold_polars",
    "replaced_key",
    "table_key",
]
