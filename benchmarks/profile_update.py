"""What corpus_profile costs after an incremental fold: the profile's per-article rows made from
the last profile's rows and the PMIDs the fold touched (graph/profile.article_rows_since, what
the asset does after an update) against the rows made from every corpus row (article_rows, the
reference), each followed by the summary, in turns in one process on the same lake. Prints
JSON: the median wall and CPU seconds of each, update over full, and whether both gave the same
profile and the same rows.

``--lake`` holds the corpus after an incremental fold (corpus/fold/touched.parquet);
``--previous`` is the profile's rows of the corpus before it (the state corpus_profile kept,
reports/corpus_profile/<release>/state/rows.parquet of the lake before the update). On the
2.52M rehearsal (benchmarks/rehearsal.py --files 84 ... --reuse-build --update):

    python benchmarks/profile_update.py --lake /tmp/i53/reh/run-84x30000/lake \\
        --previous /tmp/i53/reh/built-84x30000/lake/reports/corpus_profile/pubmed26/state/rows.parquet
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from kg_platform.graph import profile as p  # noqa: E402
from kg_platform.pubmed.fold import FOLD_TOUCHED  # noqa: E402
from kg_platform.storage.catalog import Catalog  # noqa: E402
from kg_platform.storage.lake import Lake  # noqa: E402


def timed(fn) -> tuple[float, float, object]:
    wall, cpu = time.perf_counter(), time.process_time()
    got = fn()
    return time.perf_counter() - wall, time.process_time() - cpu, got


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lake", required=True, help="the lake after an incremental fold")
    parser.add_argument("--previous", required=True, help="the profile's rows before the fold")
    parser.add_argument("--release", default="pubmed26")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    import pyarrow.parquet as pq

    lake = Lake(args.lake).scoped(release=args.release, report=args.release)
    catalog = Catalog(lake)
    con = catalog.connect()
    catalog.refresh_views(con)
    load_before = [round(x, 2) for x in os.getloadavg()]
    runs: dict[str, list] = {"update": [], "full": []}
    results: dict[str, list] = {"update": [], "full": []}

    def update():
        previous = pq.read_table(args.previous)
        touched = lake.read_parquet(FOLD_TOUCHED, columns=["pmid"])
        moved = p.article_rows_since(con, previous, touched)
        return moved, p.summarise(con)

    def full():
        p.article_rows(con)
        return {}, p.summarise(con)

    for _ in range(args.rounds):
        for name, fn in (("update", update), ("full", full)):
            wall, cpu, (moved, profile) = timed(fn)
            rows = con.execute(f"SELECT {p.ROW_COLUMNS} FROM {p.ROWS} ORDER BY pmid").fetchall()
            runs[name].append((wall, cpu))
            results[name].append((profile, hash(tuple(rows)), moved))
    out: dict = {"lake": args.lake, "rounds": args.rounds, "load_before": load_before}
    for name in runs:
        out[name] = {
            "wall_s": round(statistics.median(w for w, _ in runs[name]), 3),
            "cpu_s": round(statistics.median(c for _, c in runs[name]), 3),
            "runs_wall_s": [round(w, 2) for w, _ in runs[name]],
        }
    out["update"]["moved"] = results["update"][0][2]
    out["articles"] = results["full"][0][0].articles
    out["update_over_full_wall"] = round(out["update"]["wall_s"] / out["full"]["wall_s"], 3)
    out["update_over_full_cpu"] = round(out["update"]["cpu_s"] / out["full"]["cpu_s"], 3)
    reference = results["full"][0][:2]
    out["same_profile_and_rows"] = all(r[:2] == reference for rs in results.values() for r in rs)
    out["load_after"] = [round(x, 2) for x in os.getloadavg()]
    print(json.dumps(out))


if __name__ == "__main__":
    main()
