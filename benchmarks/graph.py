"""Graph build and store benchmark on a synthetic corpus.

Writes a synthetic corpus (Parquet, vectorised: heavy-tailed in-degree with citations to
earlier PMIDs and ~10% dangling, MeSH edges over 30k descriptors with Zipf frequency) into a
scratch lake, then in a fresh child process builds the graph with the same
``kg_platform.graph.build.build_graph`` the asset uses and measures the store. A second
child builds the citation CSR with scipy.sparse (coo -> csr) as a reference measured in the
same run, and the build child also times a plain ``np.sort`` of as many random int64 keys as
the graph has edges: a hardware-speed yardstick for a shared, noisy machine, reported as
``build_over_np_sort`` (build seconds / sort seconds; lower is better). The build's wall and
CPU seconds per phase come from ``GraphBuild.phase_seconds`` / ``phase_cpu_seconds``. The last
line printed is one JSON object.

    .venv/bin/python benchmarks/graph.py --articles 1000000 --citations 10000000 --mesh-edges 9000000
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

REFERENCE_EDGES_PER_S = 4.4e6  # reference build: 740,464,909 edges in 2.8 min on one core
REFERENCE_EDGES = 740_464_909
REFERENCE_ARTICLES = 40_000_000
# bytes per article of the article-indexed arrays: pmids, year, flags, three indptrs
ARTICLE_BYTES = 4 + 2 + 1 + 3 * 8
N_DESCRIPTORS = 30_000
CHUNK = 5_000_000


def _write_chunks(path: str, schema: pa.Schema, total: int, make) -> None:
    with pq.ParquetWriter(path, schema, compression="zstd") as writer:
        for start in range(0, total, CHUNK):
            writer.write_table(make(start, min(CHUNK, total - start)), row_group_size=CHUNK)


def _single(root: str, table: str) -> str:
    """Where a table is generated whole before it is cut into the corpus's parts."""
    return os.path.join(root, "corpus", f"{table}.whole.parquet")


def _into_parts(root: str, table: str) -> None:
    """The generated table cut into the corpus's parts (kg_platform.storage.corpus), one
    row group at a time, each bucket's rows in their order in the table."""
    from kg_platform.storage.corpus import CORPUS_TABLES, PMID_BUCKET, part_key

    whole = _single(root, table)
    source = pq.ParquetFile(whole)
    writers: dict[int, pq.ParquetWriter] = {}
    try:
        for batch in source.iter_batches(batch_size=CHUNK):
            buckets = batch.column(CORPUS_TABLES[table]).to_numpy() // PMID_BUCKET
            for bucket in np.unique(buckets).tolist():
                if bucket not in writers:
                    path = os.path.join(root, *part_key(table, bucket).split("/"))
                    os.makedirs(os.path.dirname(path), exist_ok=True)
                    writers[bucket] = pq.ParquetWriter(path, batch.schema, compression="zstd")
                writers[bucket].write_batch(batch.filter(pa.array(buckets == bucket)))
    finally:
        for writer in writers.values():
            writer.close()
    os.remove(whole)


def _rows_of(
    start: int, n: int, total: int, n_articles: int, rng: np.random.Generator, low: int = 0
):
    """Article indices of the rows ``start .. start + n`` of ``total``: ascending, drawn from
    this chunk's share of the articles, as the fold writes a child table (by PMID)."""
    lo = low + (n_articles - low) * start // total
    hi = max(low + (n_articles - low) * (start + n) // total, lo + 1)
    return np.sort(rng.integers(lo, hi, n))


def generate(
    root: str,
    n_articles: int,
    n_citations: int,
    n_mesh: int,
    seed: int = 7,
    fold_order: bool = False,
) -> None:
    """The synthetic corpus under ``root``. With ``fold_order`` the child tables' rows are
    ordered by their PMID column, as the fold writes them (the same draws per row
    otherwise); without it they come in random order."""
    rng = np.random.default_rng(seed)
    os.makedirs(os.path.join(root, "corpus"), exist_ok=True)
    os.makedirs(os.path.join(root, "mesh"), exist_ok=True)
    pmids = np.cumsum(rng.integers(1, 4, n_articles, dtype=np.int64))  # gaps, like PubMed
    years = (1950 + 76 * np.arange(n_articles) // n_articles).astype(np.int32)
    pq.write_table(
        pa.table(
            {
                "pmid": pmids,
                "year": years,
                "has_abstract": rng.random(n_articles) < 0.7,
            }
        ),
        _single(root, "articles"),
        compression="zstd",
    )

    def citations(start: int, n: int) -> pa.Table:
        if fold_order:
            citing = _rows_of(start, n, n_citations, n_articles, rng, low=1)
        else:
            citing = rng.integers(1, n_articles, n)
        # cited is earlier, skewed to old articles: in-degree falls as a power of the index
        cited = (citing * rng.random(n) ** 2.5).astype(np.int64)
        cited_pmid = pmids[cited]
        dangling = rng.random(n) < 0.1
        cited_pmid[dangling] = pmids[-1] + 1 + rng.integers(0, n_articles, int(dangling.sum()))
        return pa.table({"citing_pmid": pmids[citing], "cited_pmid": cited_pmid})

    cit_schema = pa.schema([("citing_pmid", pa.int64()), ("cited_pmid", pa.int64())])
    _write_chunks(_single(root, "citations"), cit_schema, n_citations, citations)

    uis = pa.array([f"D{k:06d}" for k in range(1, N_DESCRIPTORS + 1)])

    def mesh_edges(start: int, n: int) -> pa.Table:
        if fold_order:
            art = _rows_of(start, n, n_mesh, n_articles, rng)
        else:
            art = rng.integers(0, n_articles, n)
        desc = ((rng.zipf(1.3, n) - 1) % N_DESCRIPTORS).astype(np.int32)
        qual_major = pa.array(rng.random(n) < 0.1, mask=rng.random(n) < 0.5)
        return pa.table(
            {
                "pmid": pmids[art],
                "descriptor_ui": pa.DictionaryArray.from_arrays(pa.array(desc), uis),
                "descriptor_major": rng.random(n) < 0.25,
                "qualifier_major": qual_major,
            }
        )

    mesh_schema = pa.schema(
        [
            ("pmid", pa.int64()),
            ("descriptor_ui", pa.dictionary(pa.int32(), pa.string())),
            ("descriptor_major", pa.bool_()),
            ("qualifier_major", pa.bool_()),
        ]
    )
    _write_chunks(_single(root, "mesh_edges"), mesh_schema, n_mesh, mesh_edges)

    n_corr = max(1, n_articles // 1000)
    ref_types = np.array(["RetractionIn", "ExpressionOfConcernIn", "ErratumIn"])
    pq.write_table(
        pa.table(
            {
                "pmid": pmids[rng.integers(0, n_articles, n_corr)],
                "ref_type": ref_types[rng.integers(0, 3, n_corr)],
            }
        ),
        _single(root, "corrections"),
    )
    n_pt = max(1, n_articles // 100)
    names = np.array(["Journal Article", "Review", "Retracted Publication"])
    pq.write_table(
        pa.table(
            {
                "pmid": pmids[rng.integers(0, n_articles, n_pt)],
                "name": names[rng.choice(3, n_pt, p=[0.8, 0.19, 0.01])],
            }
        ),
        _single(root, "pubtypes"),
    )
    for table in ("articles", "citations", "mesh_edges", "corrections", "pubtypes"):
        _into_parts(root, table)
    pq.write_table(pa.table({"ui": uis}), os.path.join(root, "mesh", "descriptors.parquet"))
    letters = np.array(list("ABCDEFGHIJKLMNVZ"))
    trees = pa.array(
        [f"{letters[k % 16]}{k % 97:02d}.{k:06d}" for k in range(N_DESCRIPTORS)]
    )  # one small per-descriptor table, not per row
    pq.write_table(
        pa.table({"ui": uis, "tree_number": trees}), os.path.join(root, "mesh", "tree.parquet")
    )


def _cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _load_kernels() -> float:
    """Import the build's compiled kernels and compile (first run) or load them from
    numba's on-disk cache, outside the timed build; returns the seconds it took."""
    from kg_platform.graph import csr

    t = time.perf_counter()
    lut = np.array([-1, 0, 1, -1], dtype=np.int32)
    pmids = np.frombuffer(
        np.array([1, 2], dtype=np.int64).tobytes(), dtype=np.int64
    )  # read-only, as from Arrow
    codes = np.frombuffer(np.array([0, 1], dtype=np.int32).tobytes(), dtype=np.int32)
    flags = np.zeros(2, dtype=np.uint8)
    keys = np.empty(2, dtype=np.int64)
    csr.map_pairs(lut, pmids, pmids, keys, 0)
    csr.map_flagged(lut, pmids, codes, np.array([0, 1], dtype=np.int32), flags, flags, keys, 0)
    csr.renumber_flagged(keys, np.array([0, 1], dtype=np.int32))
    csr.rows_ascend(keys)
    csr.move_down(keys, 1, 0, 1)
    for flag_bits in (0, 1):
        indptr, indices = np.zeros(3, dtype=np.int64), np.empty(2, dtype=np.int32)
        flag, counts = np.empty(2, dtype=bool), np.zeros(2, dtype=np.int64)
        keys = np.array([0, 1 << 32], dtype=np.int64)
        csr.count_distinct(keys, flag_bits)
        csr.cut_range(keys, flag_bits, indptr, indices, flag, 0)
        bounds = np.array([0], dtype=np.int64), np.array([2], dtype=np.int64)
        csr.merge_cut(keys, *bounds, flag_bits, indptr * 0, indices, flag, counts, 0)
    return time.perf_counter() - t


def measure_build(root: str, parallel: bool, csr: str = "fused") -> dict:
    """Runs in a child process so its peak RSS is the build's and the store's alone.
    ``csr="sorting"`` builds with the sort-based CSR passes the fused ones replaced."""
    from kg_platform.graph import build as build_module
    from kg_platform.graph.build import build_graph
    from kg_platform.graph.store import KGStore, intersect_sorted
    from kg_platform.storage.lake import Lake

    kernels_s = _load_kernels()
    if csr == "sorting":
        from kg_platform_tests.support.sorting_csr import sorting_csr

        build_module._make_csr = sorting_csr
    lake = Lake(root)
    cpu = _cpu_seconds()
    t = time.perf_counter()
    build = build_graph(lake, build_id=f"bench-{csr}", parallel=parallel)
    build_s = time.perf_counter() - t
    build_cpu_s = _cpu_seconds() - cpu
    build_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    if csr == "sorting":  # the rest reads the store: the same arrays either way
        return {
            "build_s": round(build_s, 2),
            "build_cpu_s": round(build_cpu_s, 2),
            "build_edges_per_s": round(build.stats.edges / build_s),
            "phase_cpu_seconds": build.phase_cpu_seconds,
            "build_peak_rss_bytes": build_rss,
            "peak_rss_over_array_bytes": round(build_rss / build.stats.array_bytes, 3),
            "array_sha256": {name: a.sha256 for name, a in build.arrays.items()},
        }

    t = time.perf_counter()
    store = KGStore.open(lake, build.build_id)
    store.cites(0)  # maps cite_indptr and cite_indices
    open_ms = (time.perf_counter() - t) * 1e3

    rng = np.random.default_rng(1)
    n = store.n_articles
    nodes = rng.integers(0, n, 200_000).tolist()
    for i in nodes[:1000]:  # warm the pages the timed loop touches first
        store.cites(i)
    t = time.perf_counter()
    total = 0
    for i in nodes:
        total += store.cites(i).size
    expand_us = (time.perf_counter() - t) / len(nodes) * 1e6

    batch = rng.integers(0, n, 1_000_000)
    store.expand("cited_by", batch[:1000])
    t = time.perf_counter()
    got = (
        store.expand("cite", batch).neighbours.size
        + store.expand("cited_by", batch).neighbours.size
    )
    batch_s = time.perf_counter() - t

    # intersect the article lists of the 50 largest descriptors pairwise (adjacent pairs)
    top = np.argsort(store.array("mesh_article_count"))[::-1][:51]
    lists = [np.array(store.articles_of(int(d))) for d in top]
    t = time.perf_counter()
    scanned = 0
    for a, b in zip(lists[:-1], lists[1:], strict=True):
        intersect_sorted(a, b)
        scanned += a.size + b.size
    intersect_s = time.perf_counter() - t
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024

    # the yardstick, after every RSS reading: one plain sort of as many int64 keys as edges
    keys = np.random.default_rng(2).integers(0, 2**62, build.stats.edges)
    t = time.perf_counter()
    keys.sort()
    sort_s = time.perf_counter() - t
    del keys

    s = build.stats
    over_arrays = build_rss / s.array_bytes
    phases_cpu = sum(build.phase_cpu_seconds.values())
    csr_cpu = {
        phase: cpu_s
        for phase, cpu_s in build.phase_cpu_seconds.items()
        if phase.split(": ")[-1] in ("sort, dedup", "reverse sort", "cut")
    }
    edge_bytes = (s.array_bytes - ARTICLE_BYTES * s.n_articles) / s.edges

    def per(x: float, y: float, digits: int | None = None) -> float | None:
        """x / y, None when y rounds to nothing (a smoke-sized run times no phase)"""
        return round(x / y, digits) if y > 0 else None

    at_reference_bytes = ARTICLE_BYTES * REFERENCE_ARTICLES + edge_bytes * REFERENCE_EDGES
    return {
        "articles": s.n_articles,
        "citation_edges": s.citation_edges,
        "mesh_pairs": s.mesh_pairs,
        "edges": s.edges,
        "input_rows": s.citation_rows + s.mesh_rows,
        "parallel": parallel,
        "build_s": round(build_s, 2),
        "build_cpu_s": round(build_cpu_s, 2),
        "build_edges_per_s": per(s.edges, build_s),
        "build_edges_per_cpu_s": per(s.edges, build_cpu_s),
        "np_sort_s": round(sort_s, 2),
        "np_sort_keys_per_s": per(s.edges, sort_s),
        "build_over_np_sort": per(build_s, sort_s, 2),
        "kernels_load_s": round(kernels_s, 2),
        "phase_seconds": build.phase_seconds,
        "phase_cpu_seconds": build.phase_cpu_seconds,
        # the build threads' phases above; the rest is Parquet decoding on the reader
        # threads and hashing and writing on the writer thread
        "cpu_outside_phases_s": round(build_cpu_s - phases_cpu, 2),
        "csr_cpu_s": round(sum(csr_cpu.values()), 2),
        "csr_edges_per_cpu_s": per(s.edges, sum(csr_cpu.values())),
        "csr_cpu_over_np_sort": per(sum(csr_cpu.values()), sort_s, 2),
        "array_sha256": {name: a.sha256 for name, a in build.arrays.items()},
        "array_bytes": s.array_bytes,
        "build_peak_rss_bytes": build_rss,
        "peak_rss_bytes": peak,
        "peak_rss_over_array_bytes": round(over_arrays, 3),
        # linear in edges and articles (the sorts grow slightly faster): 40M articles, 740M edges
        "extrapolated_reference_scale": {
            "articles": REFERENCE_ARTICLES,
            "edges": REFERENCE_EDGES,
            "build_s": round(REFERENCE_EDGES / (s.edges / build_s)),
            "array_bytes": round(at_reference_bytes),
            "peak_rss_bytes": round(at_reference_bytes * over_arrays),
        },
        "open_ms": round(open_ms, 3),
        "expand_us_per_node": round(expand_us, 3),
        "batch_neighbours_per_s": round(got / batch_s),
        "intersect_elements_per_s": round(scanned / intersect_s) if intersect_s else None,
    }


def measure_reference(root: str) -> dict:
    """The citation CSR (both directions) the conventional way: scipy coo -> csr."""
    import scipy.sparse as sp

    from kg_platform.storage.corpus import read_corpus
    from kg_platform.storage.lake import Lake

    lake = Lake(root)
    t = time.perf_counter()
    pmids = read_corpus(lake, "articles", ["pmid"]).column("pmid").to_numpy()
    cit = read_corpus(lake, "citations")
    src = np.searchsorted(pmids, cit.column("citing_pmid").to_numpy())
    cited = cit.column("cited_pmid").to_numpy()
    dst = np.searchsorted(pmids, cited)
    inside = (dst < pmids.size) & (pmids[np.minimum(dst, pmids.size - 1)] == cited)
    ones = np.ones(int(inside.sum()), dtype=np.int8)
    m = sp.coo_matrix((ones, (src[inside], dst[inside])), shape=(pmids.size, pmids.size))
    fwd = m.tocsr()
    fwd.sum_duplicates()
    rev = m.T.tocsr()
    rev.sum_duplicates()
    seconds = time.perf_counter() - t
    return {"scipy_citation_edges": int(fwd.nnz), "scipy_seconds": round(seconds, 2)}


def _child(phase: str, root: str, *flags: str) -> tuple[dict, int]:
    proc = subprocess.run(
        [sys.executable, __file__, "--phase", phase, "--root", root, *flags],
        check=True,
        stdout=subprocess.PIPE,  # the child's errors reach this process's stderr
        text=True,
    )
    child_rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024
    return json.loads(proc.stdout.strip().splitlines()[-1]), child_rss


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--articles", type=int, default=10_000_000)
    parser.add_argument("--citations", type=int, default=100_000_000)
    parser.add_argument("--mesh-edges", type=int, default=90_000_000)
    parser.add_argument("--workdir", default=None, help="scratch folder (default: a temp dir)")
    parser.add_argument("--keep", action="store_true", help="keep the scratch lake")
    parser.add_argument("--no-reference", action="store_true", help="skip the scipy reference")
    parser.add_argument(
        "--sequential", action="store_true", help="build MeSH after citations, not alongside"
    )
    parser.add_argument(
        "--unordered",
        action="store_true",
        help="child tables in random row order (default: ordered by PMID, as the fold writes them)",
    )
    parser.add_argument(
        "--no-sorting",
        action="store_true",
        help="skip the same-run build with the sort-based CSR passes",
    )
    parser.add_argument("--lake", help="build this already generated lake (not removed)")
    parser.add_argument("--csr", default="fused", help=argparse.SUPPRESS)
    parser.add_argument("--phase", choices=["build", "reference"], help=argparse.SUPPRESS)
    parser.add_argument("--root", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.phase == "build":
        print(json.dumps(measure_build(args.root, not args.sequential, args.csr)))
        return 0
    if args.phase == "reference":
        print(json.dumps(measure_reference(args.root)))
        return 0

    root = args.lake or tempfile.mkdtemp(prefix="kg-graph-bench-", dir=args.workdir)
    try:
        t = time.perf_counter()
        if not args.lake:
            generate(
                root, args.articles, args.citations, args.mesh_edges, fold_order=not args.unordered
            )
        generate_s = time.perf_counter() - t
        mode = ["--sequential"] if args.sequential else []
        built, _ = _child("build", root, *mode)
        sha = built.pop("array_sha256")
        result = {
            "benchmark": "graph",
            "requested": {
                "articles": args.articles,
                "citations": args.citations,
                "mesh_edges": args.mesh_edges,
            },
            "row_order": "random" if args.unordered else "by PMID (as folded)",
            "generate_s": round(generate_s, 2),
            **built,
            "reference_edges_per_s": REFERENCE_EDGES_PER_S,
            "speedup_vs_reference": round(built["build_edges_per_s"] / REFERENCE_EDGES_PER_S, 2),
        }
        if not args.no_sorting:
            # the same build with the sort-based CSR passes, in a child of its own
            sorting, _ = _child("build", root, *mode, "--csr", "sorting")
            result["sorting_csr"] = {
                **{k: v for k, v in sorting.items() if k != "array_sha256"},
                "same_arrays": sorting["array_sha256"] == sha,
            }
            result["speedup_vs_sorting_csr"] = round(
                built["build_edges_per_s"] / sorting["build_edges_per_s"], 2
            )
        if not args.no_reference:
            ref, _ = _child("reference", root)
            result.update(ref)
            if ref["scipy_seconds"] > 0:  # 0.0 at a smoke size
                result["scipy_citation_edges_per_s"] = round(
                    ref["scipy_citation_edges"] / ref["scipy_seconds"]
                )
                # same-run ratio: both build both directions of every edge they keep
                result["speedup_vs_scipy"] = round(
                    result["build_edges_per_s"] / result["scipy_citation_edges_per_s"], 2
                )
        print(json.dumps(result))
    finally:
        if not args.keep and not args.lake:
            shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
