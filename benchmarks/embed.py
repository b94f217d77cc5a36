"""Embedding throughput: raw model ceiling vs naive sentence-transformers vs our feeder.

All three use the same local model files (default: the packaged all-MiniLM-L6-v2) and run
in one process, so the ratios compare like with like:
- ceiling: random token ids, sequence 256, no tokenisation, no padding waste (fp16 on CUDA);
- naive: ``SentenceTransformer.encode`` on the texts at the same batch size;
- feeder: ``kg_platform.embeddings.feeder.embed_texts`` end to end, tokenisation included.
Texts are real abstracts: PubMedQA contexts and the SciFact corpus from the reference data,
repeated to ``--n``. The last line printed is one JSON object.

    python benchmarks/embed.py                 # GPU: 60,000 texts, batch 512
    python benchmarks/embed.py --n 300         # CPU: small n, batch scaled down
"""

from __future__ import annotations

import argparse
import ast
import csv
import gzip
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
os.environ.setdefault("HF_HUB_OFFLINE", "1")


def reference_texts(data: Path) -> list[str]:
    texts = []
    for record in json.loads((data / "pubmedqa" / "pqal_dev400.json").read_text()).values():
        texts.append(" ".join(record["CONTEXTS"]))
    with gzip.open(data / "scifact" / "corpus.csv.gz", "rt", newline="") as f:
        for row in csv.DictReader(f):
            texts.append(f"{row['title']} {' '.join(ast.literal_eval(row['abstract']))}")
    return texts


def repeated(texts: list[str], n: int) -> list[str]:
    return [texts[i % len(texts)] for i in range(n)]


def sync(device: str) -> None:
    import torch

    if device.startswith("cuda"):
        torch.cuda.synchronize()


def measure_ceiling(encoder, batch: int, seq: int, texts: int) -> float:
    import torch

    generator = torch.Generator().manual_seed(0)
    ids = torch.randint(1000, 30000, (batch, seq), generator=generator).to(encoder.device)
    mask = torch.ones_like(ids)
    encoder.embed_token_batch(ids, mask)  # warm-up: kernels, allocator
    sync(encoder.device)
    reps = max(2, texts // batch)
    started = time.perf_counter()
    for _ in range(reps):
        encoder.embed_token_batch(ids, mask)
    sync(encoder.device)
    return reps * batch / (time.perf_counter() - started)


def measure_naive(model_path: str, device: str, texts: list[str], batch: int) -> float:
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(model_path, device=device)
    if device.startswith("cuda"):
        model = model.half()
    model.encode(texts[:batch], batch_size=batch)  # warm-up
    sync(device)
    started = time.perf_counter()
    model.encode(texts, batch_size=batch, normalize_embeddings=True)
    sync(device)
    return len(texts) / (time.perf_counter() - started)


def main() -> None:
    from kg_platform.embeddings.encoder import Encoder, pick_device
    from kg_platform.embeddings.feeder import FeederSettings, FeederStats, embed_texts

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=60_000, help="texts (>= 60,000 on a GPU)")
    parser.add_argument("--model", default="", help="local model folder (default: packaged)")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--batch", type=int, help="default 512 on CUDA, 16 on CPU")
    parser.add_argument("--workers", type=int, help="tokeniser processes (default: cores - 1)")
    parser.add_argument(
        "--data", default=os.environ.get("KG_REFERENCE_DATA", str(REPO.parent / "shared" / "data"))
    )
    args = parser.parse_args()

    device = pick_device(args.device)
    cuda = device.startswith("cuda")
    batch = args.batch or (512 if cuda else 16)
    encoder = Encoder(args.model, device=device, batch_size=batch)
    model_path = str(encoder.layout.path)
    texts = repeated(reference_texts(Path(args.data)), args.n)
    print(
        json.dumps(
            {
                "phase": "setup",
                "device": device,
                "texts": len(texts),
                "batch": batch,
                "model": model_path,
            }
        ),
        flush=True,
    )

    ceiling = measure_ceiling(encoder, batch, 256, min(len(texts), 20_000 if cuda else 4 * batch))
    print(json.dumps({"phase": "ceiling", "texts_per_s": round(ceiling, 1)}), flush=True)

    naive = measure_naive(model_path, device, texts, batch)
    print(json.dumps({"phase": "naive", "texts_per_s": round(naive, 1)}), flush=True)

    settings = FeederSettings(
        batch_size=batch,
        super_batch=32_768 if cuda else 4 * batch,
        chunk=512 if cuda else batch,
        workers=args.workers,
    )
    embed_texts(encoder, texts[: 2 * batch], settings)  # warm-up, also starts nothing lasting
    stats = FeederStats()
    started = time.perf_counter()
    vectors = embed_texts(encoder, texts, settings, stats)
    sync(device)
    feeder = len(texts) / (time.perf_counter() - started)
    norms = np.linalg.norm(vectors.astype(np.float32), axis=1)
    print(
        json.dumps(
            {
                "phase": "feeder",
                "texts_per_s": round(feeder, 1),
                "workers": settings.resolved_workers,
                "padding_overhead": round(stats.padding_overhead, 4),
                "waiting_for_tokens_s": round(stats.waiting_for_tokens_s, 3),
                "mean_tokens": round(stats.tokens / max(1, stats.texts), 1),
                "norm_min": round(float(norms.min()), 4),
                "norm_max": round(float(norms.max()), 4),
            }
        ),
        flush=True,
    )
    print(
        json.dumps(
            {
                "device": device,
                "texts": len(texts),
                "batch": batch,
                "ceiling_texts_per_s": round(ceiling, 1),
                "naive_texts_per_s": round(naive, 1),
                "feeder_texts_per_s": round(feeder, 1),
                "feeder_over_ceiling": round(feeder / ceiling, 3),
                "feeder_over_naive": round(feeder / naive, 3),
            }
        )
    )


if __name__ == "__main__":
    main()
