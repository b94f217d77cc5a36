"""What the Dagster definitions declare about PubMed's checks: the per-file tables' and the
folded corpus's (kg_platform.pubmed.tables and kg_platform.pubmed.fold run them; the fold
loads DuckDB and Polars, imported by the step that folds)."""

from kg_platform.checks import Checks

# each guards every reader of the tables: a failed one leaves the file's last good tables
TABLE_CHECKS: Checks = {
    "schema": ("every table matches its pandera model (validated on the collected data)", True),
    "recount_matches_xml": ("an independent pass over the XML counts what was written", True),
    "unique_pmid_version": ("no (pmid, version) appears twice in one file", True),
    "pmids_in_articles": ("every table's pmid is an article of this file", True),
}
# each guards the graph and every question: a failed one leaves the last good corpus
CORPUS_CHECKS: Checks = {
    "one_row_per_pmid": ("corpus/articles holds each PMID once", True),
    "no_deleted_pmid": ("no PMID deleted after its last record survives", True),
    "polars_recount": ("an independent Polars fold gives the same rows", True),
    "edge_sources_in_articles": ("every edge's source PMID is a corpus article", True),
}
