"""Evidence-title lookup: the titles of an answer's top paths, read from the articles table.

Writes an articles table of ``--rows`` rows sorted by PMID (titles and abstracts of about
the real sizes) twice with DuckDB, once in DuckDB's default row groups and once in the
fold's ``ARTICLE_ROW_GROUP_ROWS``, each cut into the corpus's parts per PMID bucket
(kg_platform.storage.corpus) as the fold lays it out, then times ``--lookups`` lookups of ``--per-answer``
random PMIDs each, one core:

- ``filtered_default``: the reference, as ``ask`` read titles before: the schema, then a
  read with a PMID filter, on every question, over default row groups (every part);
- ``lookup_default``: ``TitleLookup`` (footer parsed once, only the PMIDs' row groups read)
  over default row groups;
- ``lookup_fold``: ``TitleLookup`` over the fold's row groups (what ``ask`` does now).

The last line printed is one JSON object; ``speedup`` is filtered_default p50 over
lookup_fold p50, measured in the same run.

    .venv/bin/python benchmarks/titles.py --rows 5000000
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.ask import positive_int  # noqa: E402
from kg_platform.answer.titles import TitleLookup  # noqa: E402
from kg_platform.pubmed.fold import ARTICLE_ROW_GROUP_ROWS  # noqa: E402
from kg_platform.storage.corpus import PMID_BUCKET, corpus_parts, part_key  # noqa: E402
from kg_platform.storage.lake import Lake  # noqa: E402

WHOLE = "articles.whole.parquet"


def write_articles(root: str, rows: int, row_group_rows: int | None) -> None:
    os.makedirs(root)
    groups = f", ROW_GROUP_SIZE {row_group_rows}" if row_group_rows else ""
    # PMIDs 1, 4, 7, ...; a ~100-character title and a ~1,000-character abstract
    duckdb.sql(
        f"""COPY (SELECT i * 3 + 1 AS pmid, 1 AS version, 'f' AS file,
              md5(i::VARCHAR) || ' ' || md5((i + 7)::VARCHAR) || ' ' || md5((i + 3)::VARCHAR)
                AS title,
              repeat(md5((i + 1)::VARCHAR) || ' ', 30) AS abstract,
              2000 + i % 25 AS year
            FROM range({rows}) r(i) ORDER BY pmid)
          TO '{os.path.join(root, WHOLE)}' (FORMAT parquet, COMPRESSION zstd{groups})"""
    )
    whole = pq.read_table(os.path.join(root, WHOLE))
    buckets = whole.column("pmid").to_numpy() // PMID_BUCKET
    for bucket in np.unique(buckets).tolist():
        path = os.path.join(root, *part_key("articles", bucket).split("/"))
        os.makedirs(os.path.dirname(path), exist_ok=True)
        part = whole.filter(pa.array(buckets == bucket))
        pq.write_table(part, path, compression="zstd", row_group_size=row_group_rows)
    os.remove(os.path.join(root, WHOLE))


def _parts(root: str) -> list[str]:
    return [os.path.join(root, *k.split("/")) for k in corpus_parts(Lake(root), "articles")]


def filtered_read(root: str, pmids: list[int]) -> dict[int, str | None]:
    paths = _parts(root)
    if "title" not in pq.read_schema(paths[0]).names:
        return {}
    table = pq.read_table(paths, columns=["pmid", "title"], filters=[("pmid", "in", pmids)])
    return dict(zip(table["pmid"].to_pylist(), table["title"].to_pylist(), strict=True))


def timed(fn, draws: list[list[int]]) -> tuple[np.ndarray, list[dict]]:
    fn(draws[0])  # warm: footer, page cache
    ms, found = [], []
    for pmids in draws:
        t0 = time.perf_counter()
        found.append(fn(pmids))
        ms.append((time.perf_counter() - t0) * 1000.0)
    return np.asarray(ms), found


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=positive_int, default=5_000_000)
    parser.add_argument("--lookups", type=positive_int, default=200)
    parser.add_argument("--per-answer", type=positive_int, default=8)
    args = parser.parse_args()
    os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})  # one core
    base = tempfile.mkdtemp(prefix="kg-bench-titles-")
    try:
        default_root, fold_root = os.path.join(base, "default"), os.path.join(base, "fold")
        t = time.perf_counter()
        write_articles(default_root, args.rows, None)
        write_articles(fold_root, args.rows, ARTICLE_ROW_GROUP_ROWS)
        setup_s = time.perf_counter() - t
        rng = np.random.default_rng(5)
        draws = [
            (rng.integers(0, args.rows, args.per_answer) * 3 + 1).tolist()
            for _ in range(args.lookups)
        ]
        arms = {
            "filtered_default": lambda p: filtered_read(default_root, p),
            "lookup_default": TitleLookup(Lake(default_root)).titles,
            "lookup_fold": TitleLookup(Lake(fold_root)).titles,
        }
        result: dict = {"rows": args.rows, "lookups": args.lookups, "per_answer": args.per_answer}
        answers = {}
        for name, fn in arms.items():
            ms, answers[name] = timed(fn, draws)
            result[name] = {
                "p50_ms": round(float(np.percentile(ms, 50)), 3),
                "p95_ms": round(float(np.percentile(ms, 95)), 3),
            }
        if not answers["filtered_default"] == answers["lookup_default"] == answers["lookup_fold"]:
            raise SystemExit("titles differ between the arms")
        for root, name in ((default_root, "default"), (fold_root, "fold")):
            paths = _parts(root)
            result[f"parts_{name}"] = len(paths)
            result[f"row_groups_{name}"] = sum(
                pq.ParquetFile(p).metadata.num_row_groups for p in paths
            )
            result[f"bytes_{name}"] = sum(os.path.getsize(p) for p in paths)
        result["speedup"] = round(
            result["filtered_default"]["p50_ms"] / result["lookup_fold"]["p50_ms"], 2
        )
        result["setup_s"] = round(setup_s, 1)
        print(json.dumps(result))
    finally:
        shutil.rmtree(base, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
