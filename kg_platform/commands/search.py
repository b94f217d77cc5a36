"""`kg search "question" [--k N] [--json] [--lake DIR] [--model PATH] [--device D]`: the
plain vector-retrieval arm, exact top-k over the embedding index."""

from __future__ import annotations

import argparse
import json
import sys
import time

from kg_platform.commands.partition_args import add_partition_args

MAX_QUESTION_CHARS = 2000


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


def search_lake(args: argparse.Namespace):
    """The lake seen from the release to search: --release, or the newest with an index
    (the MeSH year plays no part in dense search; it is reported when given)."""
    from kg_platform.embeddings.index import INDEX
    from kg_platform.storage.lake import Lake

    root = Lake(args.lake)
    built = [k.rsplit("/", 1)[1] for k in root.list(INDEX)]
    release = args.release or (max(built) if built else None)
    if release is None:
        raise FileNotFoundError(
            f"{root.path(INDEX)}: no embedding index; materialise `embedding_index` first"
        )
    print(f"release {release}", file=sys.stderr)
    return root.scoped(release=release), {"release": release, "mesh_year": args.mesh_year}


def run_search(args: argparse.Namespace) -> int:
    question = args.question.strip()
    if not question:
        raise ValueError("question: empty")
    if len(question) > MAX_QUESTION_CHARS:
        raise ValueError(f"question: {len(question)} characters, at most {MAX_QUESTION_CHARS}")
    if any(ord(c) < 32 and c not in "\t\n" for c in question):
        raise ValueError("question: holds control characters")
    if args.k < 1:
        raise ValueError(f"--k {args.k}: must be at least 1")
    # heavy imports only once the arguments are known to be good
    from kg_platform.embeddings.encoder import Encoder
    from kg_platform.retrieval.dense import DenseIndex

    started = time.perf_counter()
    lake, build = search_lake(args)
    index = DenseIndex.open(lake, device=args.device)
    encoder = Encoder(args.model, device=args.device)
    if index.fingerprint and index.fingerprint != encoder.fingerprint:
        raise ValueError(f"index built by {index.fingerprint}, model is {encoder.fingerprint}")
    loaded = time.perf_counter()
    hits = index.search(encoder.encode([question]), k=args.k)[0]
    searched = time.perf_counter()
    titles = _titles(lake, hits.pmids.tolist())
    if args.json:
        print(
            json.dumps(
                {
                    "question": question,
                    "partition": build,
                    "k": args.k,
                    "index_vectors": len(index),
                    "hits": [{**h, "title": titles.get(int(h["pmid"]))} for h in hits.as_list()],
                    "timings_ms": {
                        "load": round((loaded - started) * 1000, 1),
                        "search": round((searched - loaded) * 1000, 1),
                    },
                }
            )
        )
        return 0
    print(f"{len(hits)} of {len(index):,} abstracts for: {question}")
    for rank, (pmid, score) in enumerate(zip(hits.pmids, hits.scores, strict=True), 1):
        print(f"{rank:>3}. {int(pmid):>9}  {score:.3f}  {titles.get(int(pmid)) or ''}")
    print(f"load {loaded - started:.2f}s, search {(searched - loaded) * 1000:.1f} ms")
    return 0


def _titles(lake, pmids: list[int]) -> dict[int, str]:
    """Titles of the hits from the corpus, when it is there (search works without it)."""
    from kg_platform.answer.titles import TitleLookup

    return {p: t for p, t in TitleLookup(lake).titles(pmids).items() if t is not None}
