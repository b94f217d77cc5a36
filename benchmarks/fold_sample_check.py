"""The incremental fold's sampled check (`check_incremental_sample`) on a built lake: the same
PMID windows (those of the corpus's first, middle and last PMID and one chosen by the file
list) refolded from the files holding them against from every file, alternately, in the same
run. Prints one JSON object.

    benchmarks/fold_sample_check.py --lake /tmp/i45/reh/run-84x30000/lake --release pubmed26
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from kg_platform.pubmed import fold  # noqa: E402
from kg_platform.storage.corpus import PMID_BUCKET, read_corpus  # noqa: E402
from kg_platform.storage.lake import Lake  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lake", required=True, help="a lake whose corpus was folded")
    parser.add_argument("--release", required=True, help="the corpus partition, e.g. pubmed26")
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    lake = Lake(args.lake).scoped(release=args.release)
    if not lake.exists(fold.FOLD_MANIFEST):
        raise SystemExit(f"{lake.path(fold.FOLD_MANIFEST)}: missing; fold the release first")
    files = json.loads(lake.read_bytes(fold.FOLD_MANIFEST))["files"]
    pmids = read_corpus(lake, "articles", columns=["pmid"]).column(0).to_numpy()
    buckets = sorted({int(p) // PMID_BUCKET for p in (pmids[0], pmids[len(pmids) // 2], pmids[-1])})
    result = fold.FoldResult(
        rows={},
        deleted=0,
        deletions_listed=0,
        dangling_citations=0,
        files=files,
        mode="incremental",
        touched_parts=buckets,  # as if the first, middle and last PMIDs' parts were touched
    )
    out: dict = {"benchmark": "fold_sample_check", "files": len(files), "rows": len(pmids)}
    seconds: dict[str, list[float]] = {"pruned": [], "every_file": []}
    for _ in range(args.rounds):
        for name, prune in (("pruned", True), ("every_file", False)):
            started = time.perf_counter()
            outcome = fold.check_incremental_sample(lake, files, result, prune=prune)
            seconds[name].append(round(time.perf_counter() - started, 2))
            if not outcome.passed:
                raise SystemExit(f"the check failed: {outcome.details}")
            out[f"{name}_details"] = outcome.details.rsplit(" on ", 1)[-1]
    out.update({f"{k}_s": v for k, v in seconds.items()})
    out["pruned_over_every_file"] = round(min(seconds["pruned"]) / min(seconds["every_file"]), 3)
    out["load"] = [round(x, 2) for x in os.getloadavg()]
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
