"""What checking the published objects costs, on a built home: `kg status` (sizes, headers
and stamps: a listing and a stat per published file, one instance query per checked
partition) against `kg status --verify` (every published byte of the graph, the corpus
tables, the embedding and grounding indexes hashed), each a fresh process as a user runs it,
in turns in the same run; with ``--reference TREE``, also `kg status` of the code in TREE
(another checkout, e.g. main before a change) as the reference for plain status. Prints
JSON: the median seconds of each, their ratios, and the bytes --verify reads at most.

    python benchmarks/status_verify.py --home /path/to/.kg --runs 3 --reference /work/main
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

PUBLISHED = ("graph", "corpus", "embeddings/index", "grounding")


def timed(home: Path, *extra: str, tree: str | None = None) -> tuple[float, str]:
    env = {**os.environ, "KG_HOME": str(home)}
    if tree is not None:
        env["PYTHONPATH"] = tree
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "kg_platform.cli", "status", *extra],
        env=env,
        capture_output=True,
        text=True,
    )
    # 1: the report names something corrupt, failed or missing (issue 38); still a status
    if done.returncode not in (0, 1):
        raise subprocess.CalledProcessError(done.returncode, done.args, done.stdout, done.stderr)
    return time.perf_counter() - started, done.stdout


def published_bytes(lake: Path) -> int:
    """Bytes under the published areas (every graph build kept, not only the current one:
    an upper bound of what --verify reads)."""
    return sum(
        p.stat().st_size for area in PUBLISHED for p in (lake / area).rglob("*") if p.is_file()
    )


def home_lake(home: Path) -> Path:
    """The lake the home's ``sources.json`` records (``kg build --lake``), else ``home/lake``."""
    sources = home / "sources.json"
    recorded = json.loads(sources.read_text()).get("lake") if sources.exists() else None
    return Path(recorded) if recorded and "://" not in recorded else home / "lake"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--home", type=Path, required=True, help="a built KG_HOME")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--reference", default=None, help="a checkout whose kg status is timed too")
    args = parser.parse_args()
    plain, verify, reference = [], [], []
    for _ in range(args.runs):
        if args.reference is not None:
            reference.append(timed(args.home, tree=args.reference)[0])
        seconds, out = timed(args.home)
        plain.append(seconds)
        seconds, verified = timed(args.home, "--verify")
        verify.append(seconds)
    for text in (out, verified):
        if "corrupt" in text:
            raise SystemExit(f"{args.home}: a published object is corrupt:\n{text}")
    result = {
        "home": str(args.home),
        "runs": args.runs,
        "status_s": round(statistics.median(plain), 3),
        "status_verify_s": round(statistics.median(verify), 3),
        "verify_over_status": round(statistics.median(verify) / statistics.median(plain), 2),
        "published_bytes_at_most": published_bytes(home_lake(args.home)),
    }
    if reference:
        result["reference_status_s"] = round(statistics.median(reference), 3)
        result["status_over_reference"] = round(
            statistics.median(plain) / statistics.median(reference), 2
        )
    print(json.dumps(result))


if __name__ == "__main__":
    main()
