"""`kg search "question" [--k N] [--json] [--lake DIR] [--model PATH] [--device D]`: the
plain vector-retrieval arm, exact top-k over the embedding index."""

from __future__ import annotations

import argparse
import json
import sys
import time

from kg_platform.commands.partition_args import add_partition_args


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("search", help="exact dense top-k over the embedding index")
    parser.add_argument("question")
    parser.add_argument("--k", type=int, default=10, help="how many PMIDs (default 10)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--lake", default=None)
    parser.add_argument("--model", default="", help="local model folder (default: packaged)")
    parser.add_argument("--device", default="auto")
    add_partition_args(parser)
    parser.set_defaults(func=run_search)


def run_search(args: argparse.Namespace) -> int:
    from kg_platform.answer.question import validate_question
    from kg_platform.answer.search import MAX_SEARCH_CHARS

    question = validate_question(args.question, MAX_SEARCH_CHARS)
    if args.k < 1:
        raise ValueError(f"--k {args.k}: must be at least 1")
    # heavy imports only once the arguments are known to be good
    from kg_platform.answer.search import DenseSearch, indexed_release
    from kg_platform.storage.lake import Lake

    started = time.perf_counter()
    root = Lake(args.lake)
    release = indexed_release(root, args.release)
    print(f"release {release}", file=sys.stderr)
    search = DenseSearch.open(root.scoped(release=release), args.model, args.device)
    loaded = time.perf_counter()
    hits = search.hits(question, args.k)
    searched = time.perf_counter()
    if args.json:
        build = {"release": release, "mesh_year": args.mesh_year}
        timings = {
            "load": round((loaded - started) * 1000, 1),
            "search": round((searched - loaded) * 1000, 1),
        }
        print(json.dumps({**search.document(question, args.k, hits, build), "timings_ms": timings}))
        return 0
    titles = search.titles_of(hits)
    print(f"{len(hits)} of {len(search.index):,} abstracts for: {question}")
    for rank, (pmid, score) in enumerate(zip(hits.pmids, hits.scores, strict=True), 1):
        print(f"{rank:>3}. {int(pmid):>9}  {score:.3f}  {titles.get(int(pmid)) or ''}")
    print(f"load {loaded - started:.2f}s, search {(searched - loaded) * 1000:.1f} ms")
    return 0
