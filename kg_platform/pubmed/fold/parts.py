"""The fold's part writers: rows in PMID order into one Parquet part per PMID bucket
(kg_platform.storage.corpus), each part in row groups of a fixed size, so the same rows give
the same bytes whichever batches they came in (a full fold and an incremental one write
byte-identical parts)."""

from __future__ import annotations

import os

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from kg_platform.storage.corpus import CORPUS_TABLES, PMID_BUCKET, part_name

# rows per row group of a corpus/articles part: small enough that an answer's title lookup
# reads little (8 PMIDs touch at most 8 groups of titles), large enough that a part keeps a
# small footer (~15 groups; kg_platform.answer.titles)
ARTICLE_ROW_GROUP_ROWS = 16_384
# rows per row group of the other corpus tables (DuckDB's own default)
CHILD_ROW_GROUP_ROWS = 122_880


class GroupWriter:
    """Batches in PMID order into one zstd Parquet file at ``local``, in row groups of
    exactly ``group_rows`` rows but the last: the same rows give the same file, whichever
    batches they came in (a full fold and an incremental one write byte-identical tables)."""

    def __init__(self, local: str, group_rows: int, schema: pa.Schema | None = None) -> None:
        self.local, self.group_rows, self.schema = local, group_rows, schema
        self._writer: pq.ParquetWriter | None = None
        self._pending: list[pa.RecordBatch] = []
        self._held = 0
        self.rows = 0

    def add(self, batch: pa.RecordBatch | pa.Table) -> None:
        if self.schema is None:
            self.schema = batch.schema
        batches = batch.to_batches() if isinstance(batch, pa.Table) else [batch]
        for b in batches:
            self._pending.append(b.cast(self.schema) if b.schema != self.schema else b)
            self._held += b.num_rows
            self.rows += b.num_rows
        if self._held >= self.group_rows:
            self._flush(final=False)

    def _flush(self, final: bool) -> None:
        if self._writer is None:
            self._writer = pq.ParquetWriter(self.local, self.schema, compression="zstd")
        table = pa.Table.from_batches(self._pending, schema=self.schema)
        whole = table.num_rows if final else table.num_rows - table.num_rows % self.group_rows
        if whole:
            # one chunk per column: the writer's page breaks follow its input's chunks
            whole_groups = table.slice(0, whole).combine_chunks()
            self._writer.write_table(whole_groups, row_group_size=self.group_rows)
        rest = table.slice(whole)
        self._pending = rest.to_batches()
        self._held = rest.num_rows

    def close(self) -> int:
        """Write what is held and close; the rows written."""
        try:
            if self.schema is not None:
                self._flush(final=True)
        finally:
            if self._writer is not None:
                self._writer.close()
        return self.rows


class PartWriter:
    """Batches of one corpus table in PMID order into one part per PMID bucket under the
    local folder ``folder`` (part_name), each a GroupWriter; ``written`` holds the rows
    of each part written, by bucket."""

    def __init__(self, folder: str, table: str, schema: pa.Schema | None = None) -> None:
        os.makedirs(folder, exist_ok=True)
        self.folder, self.table, self.schema = folder, table, schema
        self.written: dict[int, int] = {}
        self._bucket: int | None = None
        self._writer: GroupWriter | None = None

    def _close_part(self) -> None:
        if self._writer is not None and self._bucket is not None:
            self.written[self._bucket] = self._writer.close()
        self._writer = None

    def _open(self, bucket: int) -> None:
        self._close_part()
        if bucket in self.written:
            raise ValueError(f"{self.table}: rows of bucket {bucket} came after later ones")
        local = os.path.join(self.folder, part_name(bucket))
        self._writer = GroupWriter(local, group_rows(self.table), self.schema)
        self._bucket = bucket

    def add(self, batch: pa.RecordBatch | pa.Table) -> None:
        if self.schema is None:
            self.schema = batch.schema
        pmids = batch.column(CORPUS_TABLES[self.table]).to_numpy()
        if not len(pmids):
            return
        buckets = pmids // PMID_BUCKET
        cuts = [0, *(np.flatnonzero(np.diff(buckets)) + 1).tolist(), len(pmids)]
        for start, stop in zip(cuts, cuts[1:], strict=False):
            if int(buckets[start]) != self._bucket:
                self._open(int(buckets[start]))
            self._writer.add(batch.slice(start, stop - start))  # type: ignore[union-attr]

    def close(self, buckets: list[int] | None = None) -> dict[int, int]:
        """Close the last part, then write an empty part (the schema, no rows) for each of
        ``buckets`` that has none: every bucket holding an article has a part in every
        table. The rows of each part, by bucket."""
        self._close_part()
        for bucket in buckets or []:
            if bucket not in self.written:
                local = os.path.join(self.folder, part_name(bucket))
                self.written[bucket] = GroupWriter(local, 1, self.schema).close()
        return self.written


def write_parts(
    con: duckdb.DuckDBPyConnection,
    query: str,
    ranges: list[tuple[int, int]],
    writer: PartWriter,
    buckets: list[int],
) -> dict[int, int]:
    """``query`` (ordered, with ``{lo}`` and ``{hi}`` for a range's PMID bounds) run range by
    range into ``writer``'s parts (a part for each of ``buckets``); the rows of each part.
    Each range is sorted on its own, in memory, and streamed to the part writers."""
    try:
        for lo, hi in ranges:
            reader = con.sql(query.format(lo=lo, hi=hi)).to_arrow_reader(CHILD_ROW_GROUP_ROWS)
            if writer.schema is None:
                writer.schema = reader.schema
            for batch in reader:
                writer.add(batch)
    finally:
        written = writer.close(buckets)
    return written


def group_rows(table: str) -> int:
    return ARTICLE_ROW_GROUP_ROWS if table == "articles" else CHILD_ROW_GROUP_ROWS
