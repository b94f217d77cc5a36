"""A lake holding a graph build of N articles, for the question path at scale.

The MeSH tables and the load-ready grounding index are copied from a built lake (the demo's,
say), so grounding, roles and names are the real ones; the corpus tables of one release are
written straight as Parquet parts the way the fold lays them out (``storage.corpus``: one part
per PMID bucket and table, rows ascending by PMID), with
the columns the graph build reads and the titles; then ``kg_platform.graph.build.build_graph``
builds the graph as the ``graph`` asset does, ``graph_invariants`` checks it and
``layout.publish`` points readers at it. `kg ask --lake` and `kg serve --lake` then answer
from it as from any built lake. (The DuckDB recount is left out: it re-reads every table and
proves nothing about the question path.)

Per article, as in the demo corpus (20,000 records: 10.6 citation rows and 8.7 MeSH rows an
article) and vectorised with numpy over chunks of articles:

- a title (~100 bytes of Zipf-distributed words; ``_synthetic_fold``'s word pool), a year,
  an abstract flag (90%);
- 1 + Poisson(8) MeSH headings drawn Zipf(1.3) over every descriptor of the MeSH year, most
  used first as the demo corpus orders them (``pubmed.synthetic.by_popularity``: Humans,
  Female, ... then the rest in a seeded order), distinct per article, 30% major;
- negative-binomial citations (mean 10) to earlier articles, skewed towards old ones, 10%
  to PMIDs outside the corpus (dangling, dropped by the build);
- a 'Journal Article' publication type, 0.05% 'Retracted Publication'; 0.1% corrections.

The same arguments give the same tables (fixed seed); a lake made once is reused (its
``scale.json`` records the arguments).
"""

from __future__ import annotations

import json
import os
import random
import shutil
import sys
import time

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _synthetic_fold import _Vocabulary  # noqa: E402

from kg_platform.graph import layout  # noqa: E402
from kg_platform.graph.build import build_graph  # noqa: E402
from kg_platform.graph.checks import check_invariants  # noqa: E402
from kg_platform.graph.store import KGStore  # noqa: E402
from kg_platform.pubmed.synthetic import by_popularity  # noqa: E402
from kg_platform.storage.corpus import (  # noqa: E402
    CORPUS_TABLES,
    bucket_of,
    corpus_folder,
    corpus_parts,
    part_key,
)
from kg_platform.storage.lake import Lake  # noqa: E402

CHUNK_ARTICLES = 400_000  # titles of a chunk stay within the word pool (96 MiB)
ROW_GROUP = 1 << 20
CITATIONS_MEAN = 10.0
HEADINGS_MEAN = 8.0
MAJOR_SHARE = 0.3
DANGLING_SHARE = 0.1
RETRACTED_SHARE = 0.0005
CORRECTION_SHARE = 0.001
SEED = 27


def _writer(path: str, schema: pa.Schema) -> pq.ParquetWriter:
    return pq.ParquetWriter(path, schema, compression="zstd")


SCHEMAS = {
    "articles": pa.schema(
        [
            ("pmid", pa.int64()),
            ("title", pa.string()),
            ("has_abstract", pa.bool_()),
            ("year", pa.int32()),
        ]
    ),
    "citations": pa.schema([("citing_pmid", pa.int64()), ("cited_pmid", pa.int64())]),
    "mesh_edges": pa.schema(
        [
            ("pmid", pa.int64()),
            ("descriptor_ui", pa.string()),
            ("descriptor_major", pa.bool_()),
            ("qualifier_major", pa.bool_()),
        ]
    ),
    "corrections": pa.schema([("pmid", pa.int64()), ("ref_type", pa.string())]),
    "pubtypes": pa.schema([("pmid", pa.int64()), ("name", pa.string())]),
}


def write_corpus(lake: Lake, n_articles: int, descriptor_uis: list[str], seed: int = SEED) -> dict:
    """The five corpus tables the graph reads, as the fold lays them out (one Parquet part per
    PMID bucket and table, ``kg_platform.storage.corpus``; every bucket holding an article has
    a part in every table, a child's possibly empty); their rows, bytes and parts."""
    rng = np.random.default_rng(seed)
    vocab = _Vocabulary(rng)
    uis = pa.array(descriptor_uis, pa.string())
    n_desc = len(descriptor_uis)
    pmids = np.cumsum(rng.integers(1, 4, n_articles, dtype=np.int64))  # gaps, like PubMed
    beyond = int(pmids[-1]) + 1
    parts = _Parts(lake)
    rows = dict.fromkeys(SCHEMAS, 0)
    try:
        for start in range(0, n_articles, CHUNK_ARTICLES):
            index = np.arange(start, min(start + CHUNK_ARTICLES, n_articles), dtype=np.int64)
            for table, frame in _chunk(rng, vocab, uis, n_desc, pmids, index, beyond).items():
                parts.write(table, frame)
                rows[table] += frame.num_rows
    finally:
        parts.close()
    sizes = {t: sum(os.path.getsize(lake.path(k)) for k in corpus_parts(lake, t)) for t in SCHEMAS}
    return {"rows": rows, "bytes": sizes, "parts": len(corpus_parts(lake, "articles"))}


class _Parts:
    """One open writer per table for the bucket being written; rows arrive in PMID order,
    so a bucket's part is closed once a later bucket's rows come."""

    def __init__(self, lake: Lake) -> None:
        self.lake = lake
        self.open: dict[str, tuple[int, pq.ParquetWriter]] = {}
        self.buckets: set[int] = set()
        for table in SCHEMAS:
            os.makedirs(lake.path(corpus_folder(table)), exist_ok=True)

    def write(self, table: str, frame: pa.Table) -> None:
        keys = bucket_of(frame.column(CORPUS_TABLES[table]).to_numpy())
        if table == "articles":
            self.buckets.update(np.unique(keys).tolist())
        cuts = np.flatnonzero(np.diff(keys)) + 1
        for lo, hi in zip([0, *cuts.tolist()], [*cuts.tolist(), keys.size], strict=True):
            if hi > lo:
                self._writer(table, int(keys[lo])).write_table(
                    frame.slice(lo, hi - lo), row_group_size=ROW_GROUP
                )

    def _writer(self, table: str, bucket: int) -> pq.ParquetWriter:
        current = self.open.get(table)
        if current is not None and current[0] == bucket:
            return current[1]
        if current is not None:
            current[1].close()
        writer = _writer(self.lake.path(part_key(table, bucket)), SCHEMAS[table])
        self.open[table] = (bucket, writer)
        return writer

    def close(self) -> None:
        for _, writer in self.open.values():
            writer.close()
        self.open.clear()
        for table, schema in SCHEMAS.items():  # an empty part where a bucket has no rows
            for bucket in self.buckets:
                path = self.lake.path(part_key(table, bucket))
                if not os.path.exists(path):
                    pq.write_table(schema.empty_table(), path, compression="zstd")


def _chunk(
    rng: np.random.Generator,
    vocab: _Vocabulary,
    uis: pa.Array,
    n_desc: int,
    pmids: np.ndarray,
    index: np.ndarray,
    beyond: int,
) -> dict[str, pa.Table]:
    n = index.size
    pmid = pmids[index]
    title_len = np.clip(rng.normal(100, 35, n), 20, 300).astype(np.int64)
    articles = pa.table(
        {
            "pmid": pmid,
            "title": vocab.text(rng, title_len, np.ones(n, dtype=bool)),
            "has_abstract": rng.random(n) < 0.9,
            "year": (1950 + 77 * index // pmids.size).astype(np.int32),
        },
        schema=SCHEMAS["articles"],
    )

    # MeSH: distinct headings per article, in article order (np.unique of article-major keys)
    headings = 1 + rng.poisson(HEADINGS_MEAN, n)
    local = np.repeat(np.arange(n, dtype=np.int64), headings)
    desc = (rng.zipf(1.3, local.size) - 1) % n_desc
    pairs = np.unique((local << 32) | desc)
    local, desc = pairs >> 32, (pairs & 0xFFFFFFFF).astype(np.int32)
    mesh_edges = pa.table(
        {
            "pmid": pmid[local],
            "descriptor_ui": uis.take(pa.array(desc)),
            "descriptor_major": rng.random(local.size) < MAJOR_SHARE,
            "qualifier_major": pa.nulls(local.size, pa.bool_()),
        },
        schema=SCHEMAS["mesh_edges"],
    )

    # citations: earlier articles, skewed to old ones; a share dangling beyond the corpus
    n_cit = rng.negative_binomial(2, 2 / (2 + CITATIONS_MEAN), n)
    c_local = np.repeat(np.arange(n, dtype=np.int64), n_cit)
    cited = pmids[(index[c_local] * rng.random(c_local.size) ** 2.5).astype(np.int64)]
    dangling = rng.random(c_local.size) < DANGLING_SHARE
    cited[dangling] = beyond + rng.integers(0, pmids.size, int(dangling.sum()))
    keys = np.unique((c_local << 40) | cited)
    c_local, cited = keys >> 40, keys & ((1 << 40) - 1)
    citations = pa.table(
        {"citing_pmid": pmid[c_local], "cited_pmid": cited}, schema=SCHEMAS["citations"]
    )

    retracted = np.flatnonzero(rng.random(n) < RETRACTED_SHARE)
    p_local = np.sort(np.concatenate([np.arange(n), retracted]), kind="stable")
    names = np.zeros(p_local.size, dtype=np.int32)
    names[1:][p_local[1:] == p_local[:-1]] = 1  # the second row of a retracted article
    pubtypes = pa.table(
        {
            "pmid": pmid[p_local],
            "name": pa.array(["Journal Article", "Retracted Publication"]).take(pa.array(names)),
        },
        schema=SCHEMAS["pubtypes"],
    )
    k_local = np.flatnonzero(rng.random(n) < CORRECTION_SHARE)
    ref_types = pa.array(["ErratumIn", "CommentIn", "RetractionIn", "ExpressionOfConcernIn"])
    kinds = rng.choice(4, k_local.size, p=[0.6, 0.3, 0.05, 0.05]).astype(np.int32)
    corrections = pa.table(
        {"pmid": pmid[k_local], "ref_type": ref_types.take(pa.array(kinds))},
        schema=SCHEMAS["corrections"],
    )
    return {
        "articles": articles,
        "citations": citations,
        "mesh_edges": mesh_edges,
        "corrections": corrections,
        "pubtypes": pubtypes,
    }


def _vocabulary(lake: Lake) -> list[str]:
    """The MeSH year's descriptor UIs, most used first as the synthetic corpus orders them."""
    table = pq.read_table(lake.local_path("mesh/descriptors.parquet"), columns=["ui", "name"])
    pairs = list(zip(table.column("ui").to_pylist(), table.column("name").to_pylist(), strict=True))
    return [ui for ui, _ in by_popularity(pairs, random.Random(SEED))]


def lake_at_scale(reference: Lake, work: str, n_articles: int) -> tuple[str, dict]:
    """The root of a lake under ``work`` whose published graph build has ``n_articles``
    articles, with ``reference``'s MeSH tables and grounding index (``reference`` is scoped
    to its release and MeSH year); made once, then reused. Also what making it took."""
    release, year = reference.scope.release, reference.scope.mesh_year
    if release is None or year is None:
        raise ValueError(f"{reference.root}: a lake with a published graph build is needed")
    root = os.path.join(work, f"lake-{n_articles}")
    stamp = os.path.join(root, "scale.json")
    wanted = {"articles": n_articles, "release": release, "mesh_year": year, "seed": SEED}
    if os.path.exists(stamp):
        with open(stamp) as f:
            made = json.load(f)
        if made["wanted"] == wanted:
            return root, {**made, "reused": True}
    shutil.rmtree(root, ignore_errors=True)
    lake = Lake(root).scoped(release=release, mesh_year=year)
    for area in ("mesh", "grounding"):
        shutil.copytree(reference.path(area), lake.path(area))
    t = time.perf_counter()
    corpus = write_corpus(lake, n_articles, _vocabulary(lake))
    write_s = time.perf_counter() - t
    t = time.perf_counter()
    build = build_graph(lake)
    build_s = time.perf_counter() - t
    t = time.perf_counter()
    outcome = check_invariants(KGStore.open(lake, build.build_id))
    if not outcome.passed:
        raise RuntimeError(f"graph build {build.build_id}: graph_invariants failed: {outcome}")
    check_s = time.perf_counter() - t
    layout.publish(lake, build.build_id)
    s = build.stats
    made = {
        "wanted": wanted,
        "corpus": corpus,
        "graph": {
            "build_id": build.build_id,
            "articles": s.n_articles,
            "descriptors": s.n_descriptors,
            "nodes": s.n_articles + s.n_descriptors,
            "citation_edges": s.citation_edges,
            "mesh_pairs": s.mesh_pairs,
            "array_bytes": s.array_bytes,
        },
        "seconds": {
            "write_corpus": round(write_s, 1),
            "build_graph": round(build_s, 1),
            "graph_invariants": round(check_s, 1),
        },
    }
    with open(stamp, "w") as f:
        json.dump(made, f)
    return root, {**made, "reused": False}
