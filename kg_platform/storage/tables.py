"""Where the per-file tables live in the lake: what parsing one PubMed file writes.

Parsing a file (``pubmed26n0001``) writes one Parquet file per table, the corpus tables of
``storage/corpus.py`` plus ``deletions``: ``tables/<table>/<file>.parquet``. Readers never
spell a key: :func:`table_key` is one file's table, :func:`tables_folder` a table's folder
(what a listing or an S3 ``ls`` reads), :func:`file_tables_glob` every table of one file
(how an error names them) and :func:`tabled_files` the files that have been parsed. The
writer is ``kg_platform.pubmed.tables``; the fold reads them into the corpus.
"""

from __future__ import annotations

from kg_platform.storage.lake import Lake

TABLES_PREFIX = "tables"


def tables_folder(table: str) -> str:
    """The lake key of a per-file table's folder."""
    return f"{TABLES_PREFIX}/{table}"


def table_key(table: str, file: str) -> str:
    """The lake key of one file's table."""
    return f"{tables_folder(table)}/{file}.parquet"


def file_tables_glob(file: str) -> str:
    """The lake glob of every table of one file."""
    return f"{TABLES_PREFIX}/*/{file}.parquet"


def tabled_files(lake: Lake) -> set[str]:
    """The files with an articles table in the lake (the parsed files)."""
    return {
        k.rsplit("/", 1)[1].removesuffix(".parquet") for k in lake.list(tables_folder("articles"))
    }
