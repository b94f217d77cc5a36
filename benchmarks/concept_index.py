"""Concept index build time: a cold build (empty vector cache), then the same build again.

The MeSH tables come from the reference data (``$KG_REFERENCE_DATA/mesh``: the descriptor
TSVs and the thesaurus terms, every concept's terms), cached as Parquet by
``grounding_versions.mesh_frames``. The terms are written to a lake (``--lake``), the concept
index is built with the packaged MiniLM encoder (or ``--model``), then built again: the
second build finds every surface in the vector cache and embeds nothing, so the ratio of
the two is what the cache saves. With ``--then-tsv`` a third build indexes the descriptor
TSV vocabulary (preferred concepts' terms only) against the same cache.

``--sample N`` indexes the surfaces of every k-th descriptor instead, about N surfaces, to
extrapolate when the full build cannot run. ``--fresh`` empties the lake's vector cache
first (otherwise a cache left by an earlier run is reused, and the "cold" build says how
many surfaces it reused). The last line printed is one JSON object.

    nice -n 10 .venv/bin/python benchmarks/concept_index.py --fresh --device cpu
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import polars as pl

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

from grounding_versions import mesh_frames  # noqa: E402

from kg_platform.embeddings.concepts import (  # noqa: E402
    CONCEPT_CACHE,
    MESH_TERMS,
    build_concept_index,
    concept_surfaces,
)
from kg_platform.embeddings.feeder import FeederSettings  # noqa: E402
from kg_platform.settings import reference_data_dir  # noqa: E402
from kg_platform.storage.lake import Lake  # noqa: E402


def sampled(terms: pl.DataFrame, n: int) -> pl.DataFrame:
    """The terms of every k-th descriptor (UI order), k chosen for about ``n`` surfaces."""
    surfaces = concept_surfaces(terms).height
    uis = terms["ui"].unique().sort()
    step = max(1, round(surfaces / n))
    return terms.filter(pl.col("ui").is_in(uis.gather_every(step).implode()))


def build(lake: Lake, terms: pl.DataFrame, encoder, settings: FeederSettings, label: str) -> dict:
    lake.write_parquet(MESH_TERMS, terms.to_arrow())
    started = time.perf_counter()
    result = build_concept_index(
        lake, encoder, settings, log=lambda line: print(f"  {label}: {line}", flush=True)
    )
    wall = time.perf_counter() - started
    row = {
        "surfaces": result.surfaces,
        "descriptors": result.descriptors,
        "embedded": result.embedded,
        "reused": result.reused,
        "seconds": round(wall, 2),
        "embed_seconds": round(result.embed_seconds, 2),
        "surfaces_per_s": round(result.surfaces / wall, 1),
        "embedded_per_s": (
            round(result.embedded / result.embed_seconds, 1) if result.embedded else None
        ),
    }
    print(label, json.dumps(row), flush=True)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lake", default="/tmp/kg_concept_bench")
    parser.add_argument("--mesh-cache", default="/tmp/kg_grounding_cache")
    parser.add_argument("--sample", type=int, default=0, help="about N surfaces (0: all)")
    parser.add_argument("--fresh", action="store_true", help="empty the vector cache first")
    parser.add_argument("--then-tsv", action="store_true", help="also index the TSV vocabulary")
    parser.add_argument("--model", default="", help="local model folder (default: packaged)")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--workers", type=int, default=None, help="tokeniser processes")
    parser.add_argument("--torch-threads", type=int, default=None, help="torch CPU threads")
    args = parser.parse_args()
    if args.torch_threads:
        import torch

        torch.set_num_threads(args.torch_threads)

    from kg_platform.embeddings.encoder import Encoder

    data = reference_data_dir()
    terms = mesh_frames(data / "mesh", Path(args.mesh_cache) / "thesaurus")["terms"]
    if args.sample:
        terms = sampled(terms, args.sample)
    lake = Lake(args.lake)
    if args.fresh:
        lake.remove(CONCEPT_CACHE)
    encoder = Encoder(args.model, device=args.device)
    settings = FeederSettings(batch_size=args.batch_size, workers=args.workers)
    out: dict = {
        "model": encoder.fingerprint,
        "device": encoder.device,
        "torch_threads": __import__("torch").get_num_threads(),
        "cpus": os.cpu_count(),
        "load_average_at_start": os.getloadavg()[0],
        "sample": args.sample or None,
        "batch_size": args.batch_size,
    }
    out["first"] = build(lake, terms, encoder, settings, "first")
    out["again"] = build(lake, terms, encoder, settings, "again")
    out["again_vs_first"] = round(out["again"]["seconds"] / out["first"]["seconds"], 4)
    if args.then_tsv:
        tsv = mesh_frames(data / "mesh" / "tsv", Path(args.mesh_cache) / "tsv")["terms"]
        if args.sample:
            tsv = tsv.filter(pl.col("ui").is_in(terms["ui"].unique().implode()))
        out["tsv_vocabulary"] = build(lake, tsv, encoder, settings, "tsv_vocabulary")
    out["load_average_at_end"] = os.getloadavg()[0]
    print(json.dumps(out))


if __name__ == "__main__":
    main()
