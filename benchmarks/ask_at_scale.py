"""A cold `kg ask` and `kg serve` on a graph of N articles, beside the same on a built lake.

Makes (once, then reuses) a lake whose published graph build has ``--articles`` articles
(default 10,000,000: with the MeSH year's descriptors, a 10M-node graph) from a built lake's
MeSH tables and grounding index, a synthetic corpus written as the fold writes it and the
real graph build (``benchmarks/_graph_at_scale.py``), then measures on both lakes in the same
run, the built lake (default: the one `kg build` recorded, e.g. `make demo`'s) first:

- ``cold_ask``: ``benchmarks/cold_ask.py``'s figures (cold `kg ask` wall, CPU and the
  child's own peak RSS, median of ``--runs`` per question; the warm in-process ask; the
  grounding index opened in a fresh process);
- ``serve``: ``benchmarks/serve.py``'s figures (`kg serve` under ``--clients`` concurrent
  keep-alive clients, ``--requests`` POST /ask, p50/p95/p99 overall, giant and non-giant;
  the server's peak RSS; the same questions in process);
- ``scale_over_reference``: the large graph's figure over the built lake's for each.

    KG_HOME=.kg .venv/bin/python benchmarks/ask_at_scale.py --work /tmp/kg-scale [--remove]

The machine's load is printed before and after each part (``loadavg``). The last line is one
JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import cold_ask  # noqa: E402
import serve  # noqa: E402
from _graph_at_scale import lake_at_scale  # noqa: E402

from kg_platform.commands.partition_args import scoped_lake  # noqa: E402
from kg_platform.settings import Settings  # noqa: E402


def _ratio(a: float | None, b: float | None) -> float | None:
    return round(a / b, 2) if a is not None and b else None


def _loadavg() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def compare(reference: dict, scaled: dict) -> dict:
    """The large graph's figures over the reference lake's."""
    out = {}
    if "cold" in reference:
        out["cold_wall_s"] = _ratio(
            scaled["cold"]["wall_s_median"], reference["cold"]["wall_s_median"]
        )
        out["cold_cpu_s"] = _ratio(
            scaled["cold"]["cpu_s_median"], reference["cold"]["cpu_s_median"]
        )
        out["cold_peak_rss_mb"] = _ratio(
            scaled["cold"]["peak_rss_mb_median"], reference["cold"]["peak_rss_mb_median"]
        )
        out["warm_ask_ms"] = _ratio(
            scaled["warm"]["ask_ms_median"], reference["warm"]["ask_ms_median"]
        )
    if "service_by_workers" in reference:
        for w, ref in reference["service_by_workers"].items():
            big = scaled["service_by_workers"][w]
            for part in ("all", "non_giant", "giant"):
                out[f"serve_{w}w_{part}_p95_ms"] = _ratio(
                    big[part].get("p95_ms"), ref[part].get("p95_ms")
                )
            out[f"serve_{w}w_requests_per_s"] = _ratio(big["requests_per_s"], ref["requests_per_s"])
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lake", default=None, help="the built lake (default: `kg build`'s)")
    parser.add_argument("--articles", type=int, default=10_000_000)
    parser.add_argument(
        "--work", default="/tmp/kg-ask-at-scale", help="where the large lake is made and kept"
    )
    parser.add_argument("--remove", action="store_true", help="remove the large lake at the end")
    parser.add_argument("--runs", type=int, default=5, help="cold runs per question")
    parser.add_argument("--questions", type=int, default=3, help="answered cold questions")
    parser.add_argument("--serve-questions", type=int, default=8, help="answered served questions")
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--requests", type=int, default=800)
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    parser.add_argument(
        "--heavy-candidates",
        type=int,
        nargs="+",
        default=None,
        help="also serve with `kg serve --heavy-candidates N` for each N (service_by_config)",
    )
    parser.add_argument("--no-serve", action="store_true", help="the cold figures only")
    args = parser.parse_args()
    if args.articles < 1:
        parser.error("--articles must be at least 1")
    reference_root = args.lake or Settings.load().lake
    reference, _ = scoped_lake(
        argparse.Namespace(lake=reference_root, release=None, mesh_year=None), quiet=True
    )
    os.makedirs(args.work, exist_ok=True)
    load = {"start": _loadavg()}
    try:
        scaled_root, made = lake_at_scale(reference, args.work, args.articles)
        load["after_making_lake"] = _loadavg()
        lakes = {"reference": reference_root, "scaled": scaled_root}
        cold = {
            name: cold_ask.measure(root, args.runs, args.questions) for name, root in lakes.items()
        }
        load["after_cold"] = _loadavg()
        served = {}
        if not args.no_serve:
            served = {
                name: serve.measure(
                    root,
                    args.clients,
                    args.requests,
                    args.serve_questions,
                    args.workers,
                    args.heavy_candidates,
                )
                for name, root in lakes.items()
            }
            load["after_serve"] = _loadavg()
    finally:
        if args.remove:
            shutil.rmtree(os.path.join(args.work, f"lake-{args.articles}"), ignore_errors=True)
    result = {
        "articles": args.articles,
        "scaled_lake": {**made, "root": scaled_root, "removed": args.remove},
        "cpus": os.cpu_count(),
        "loadavg": load,
        "cold_ask": cold,
        "serve": served or None,
        "scale_over_reference": {
            **compare(cold["reference"], cold["scaled"]),
            **(compare(served["reference"], served["scaled"]) if served else {}),
        },
        "scaled_within_targets": {
            "cold_wall_s": cold["scaled"]["wall_within_target"],
            "cold_peak_rss_mb": cold["scaled"]["rss_within_target"],
            **(
                {
                    f"serve_{w}w_non_giant_p95_ms": ok
                    for w, ok in served["scaled"]["non_giant_p95_within_target"].items()
                }
                if served
                else {}
            ),
        },
    }
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
