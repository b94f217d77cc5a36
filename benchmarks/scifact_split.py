"""Split a SciFact claims CSV into K train / test file pairs by claim, for `kg eval
verification --claims TRAIN --test FILE`: fold f's claims (``claim_folds``, the folds
`kg eval verification --claims` scores out of fold, same seed) go to ``test_f.csv``, every
other claim to ``train_f.csv``; rows are copied as they are. The last line printed is one
JSON object.

    .venv/bin/python benchmarks/scifact_split.py --out /tmp/scifact_folds
    .venv/bin/kg eval verification --kind probe --claims /tmp/scifact_folds/train_0.csv \\
        --test /tmp/scifact_folds/test_0.csv --json
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from kg_platform.answer.verifier import read_claims, read_corpus, scifact_pairs  # noqa: E402
from kg_platform.evaluation.scifact.evaluation import claim_folds  # noqa: E402

REFERENCE = Path(os.environ.get("KG_REFERENCE_DATA", "../shared/data"))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--claims", type=Path, default=REFERENCE / "scifact" / "claims_train.csv")
    parser.add_argument("--corpus", type=Path, default=REFERENCE / "scifact" / "corpus.csv.gz")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--folds", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    pairs = scifact_pairs(read_claims(args.claims), read_corpus(args.corpus), args.seed)
    fold_of = {
        p.claim_id: int(f)
        for p, f in zip(pairs, claim_folds(pairs, args.folds, args.seed), strict=True)
    }
    with open(args.claims, encoding="utf-8", newline="") as f:
        reader = csv.DictReader(f)
        fields, rows = reader.fieldnames, list(reader)
    args.out.mkdir(parents=True, exist_ok=True)
    written = {}
    for fold in range(args.folds):
        for name, wanted in (("train", False), ("test", True)):
            path = args.out / f"{name}_{fold}.csv"
            kept = [r for r in rows if (fold_of[int(r["id"])] == fold) == wanted]
            with open(path, "w", encoding="utf-8", newline="") as f:
                writer = csv.DictWriter(f, fieldnames=fields)
                writer.writeheader()
                writer.writerows(kept)
            written[path.name] = len({r["id"] for r in kept})
    print(
        json.dumps({"claims": str(args.claims), "out": str(args.out), "claims_per_file": written})
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
