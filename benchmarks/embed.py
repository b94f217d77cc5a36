"""Embedding throughput: the raw ceiling, the model alone on sorted real texts, and the
project's path from token files (issue 40), in one process, so the ratios compare like
with like.

- ceiling: random ids, sequence 256, batch 1,024 (fp16 on CUDA), no tokenising, no padding;
- model alone: the real texts tokenised up front, sorted by length, padded to each batch's
  own width and already on the device; first pass (a new width almost every batch) and
  second pass;
- path: ``embedding_shards``' feed: token files (the project's Parquet format, written here
  from the reference texts) read by path, super-batches sorted by length, widths rounded to
  multiples of 16, every shape warmed up first, pinned staging (``feeder.embed_tokens``);
- agreement: the path's vectors against the CPU's fp32 vectors of the same texts;
- tokenising: ``tokenizers`` on one thread (texts/s per core), and the token files' size.

Texts are real abstracts: PubMedQA contexts and the SciFact corpus from the reference data
(5,583), repeated to ``--n``. Imports numpy, torch, transformers, tokenizers and pyarrow only
(no dagster, no polars). The last line printed is one JSON object.

    python benchmarks/embed.py --data /path/to/shared/data       # GPU: 200,000 texts
    python benchmarks/embed.py --null-model                      # CPU: the feed alone
    python benchmarks/embed.py --device cpu --n 2000             # CPU: a small real run
"""

from __future__ import annotations

import argparse
import ast
import csv
import gzip
import json
import os
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
# tokenising is measured on one thread: the figure is per core
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import numpy as np  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def reference_texts(data: Path) -> list[str]:
    texts = []
    for record in json.loads((data / "pubmedqa" / "pqal_dev400.json").read_text()).values():
        texts.append(" ".join(record["CONTEXTS"]))
    with gzip.open(data / "scifact" / "corpus.csv.gz", "rt", newline="") as f:
        for row in csv.DictReader(f):
            texts.append(f"{row['title']} {' '.join(ast.literal_eval(row['abstract']))}")
    return texts


def sync(device: str) -> None:
    import torch

    if device.startswith("cuda"):
        torch.cuda.synchronize()


class NullModel:
    """Stands in for the encoder: the attributes the feeder reads, and vectors that are
    zeros at once, so only the feed (reading, sorting, padding, staging) is timed."""

    def __init__(self, spec, dim: int = 384) -> None:
        import torch

        self.device = "cpu"
        self.dtype = torch.float16  # what the GPU's model returns
        self.dim = dim
        self.max_length = spec.max_length
        self.pad_id = spec.pad_id
        self._spec = spec

    def tokenizer_spec(self):
        return self._spec

    def embed_token_batch(self, input_ids, attention_mask):
        import torch

        return torch.zeros((input_ids.shape[0], self.dim), dtype=self.dtype)


def measure_tokenising(spec, texts: list[str]) -> dict:
    """``tokenizers`` on one thread (TOKENIZERS_PARALLELISM=false), chunks of 2,048."""
    from kg_platform.embeddings.tokens import tokenise

    started, cpu = time.perf_counter(), time.process_time()
    ids, lengths = tokenise(spec, texts)
    seconds, cpu = time.perf_counter() - started, time.process_time() - cpu
    return {
        "texts": len(texts),
        "seconds": round(seconds, 3),
        "cpu_seconds": round(cpu, 3),
        "texts_per_s_per_core": round(len(texts) / seconds, 1),
        "texts_per_cpu_s": round(len(texts) / cpu, 1),
        "core_seconds_per_million": round(1e6 * cpu / len(texts), 1),
        "mean_tokens": round(float(lengths.mean()), 1),
        "at_max_length": round(float((lengths == spec.max_length).mean()), 4),
        "ids": ids,
        "lengths": lengths,
    }


def write_token_files(spec, ids, lengths, n: int, files: int, folder: Path) -> dict:
    """``n`` texts (the unique ones repeated) as ``files`` token files, the project's
    format, under ``folder``; returns their paths and sizes."""
    from kg_platform.embeddings.tokens import TokenFile, ids_sha256, to_bytes

    offsets = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    paths, sizes = [], []
    bounds = np.linspace(0, n, files + 1).astype(np.int64)
    for f in range(files):
        rows = np.arange(bounds[f], bounds[f + 1]) % len(lengths)
        part_lengths = lengths[rows]
        starts = offsets[rows]
        flat = np.concatenate(
            [ids[s : s + int(k)] for s, k in zip(starts, part_lengths, strict=True)]
        )
        part_offsets = np.zeros(len(rows) + 1, dtype=np.int64)
        np.cumsum(part_lengths, out=part_offsets[1:])
        name = f"bench{f:04d}"
        meta = {
            "format": 1,
            "file": name,
            "fingerprint": spec.fingerprint,
            "max_length": spec.max_length,
            "vocab_size": spec.vocab_size,
            "pad_id": spec.pad_id,
            "count": len(rows),
            "tokens": int(part_offsets[-1]),
            "ids_sha256": ids_sha256(flat),
        }
        pmids = np.arange(bounds[f], bounds[f + 1], dtype=np.int64)
        data = to_bytes(TokenFile(name, pmids, part_lengths, flat, part_offsets, meta))
        path = folder / f"{name}.arrow"
        path.write_bytes(data)
        paths.append(path)
        sizes.append(len(data))
    return {"paths": paths, "bytes": sum(sizes)}


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


def measure_model_alone(encoder, ids, lengths, n: int, batch: int) -> tuple[float, float]:
    """Texts/s of the model on ``n`` real texts, sorted by length, padded to each batch's
    own width, on the device before the clock starts: first pass, second pass."""
    import torch

    offsets = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    rows = np.arange(n) % len(lengths)
    rows = rows[np.argsort(-lengths[rows].astype(np.int64), kind="stable")]
    batches = []
    for start in range(0, n, batch):
        chunk = rows[start : start + batch]
        width = int(lengths[chunk].max())
        padded = np.full((len(chunk), width), encoder.pad_id, dtype=np.int64)
        for i, r in enumerate(chunk):
            padded[i, : lengths[r]] = ids[offsets[r] : offsets[r + 1]]
        on_device = torch.from_numpy(padded).to(encoder.device)
        mask = (
            torch.arange(width)[None, :]
            < torch.from_numpy(lengths[chunk].astype(np.int64))[:, None]
        ).to(encoder.device, torch.int64)
        batches.append((on_device, mask))
    passes = []
    for _ in range(2):
        sync(encoder.device)
        started = time.perf_counter()
        for on_device, mask in batches:
            encoder.embed_token_batch(on_device, mask)
        sync(encoder.device)
        passes.append(n / (time.perf_counter() - started))
    return passes[0], passes[1]


def measure_path(
    encoder, spec, paths: list[Path], settings, keep: int
) -> tuple[float, np.ndarray, dict]:
    """The project's path: token files read by path, then ``feeder.embed_tokens``; the
    blocks are counted and the first ``keep`` rows kept (writing them out is the caller's
    cost, ``embedding_shards``' shard files, not the feed's)."""
    from kg_platform.embeddings.feeder import FeederStats, embed_tokens
    from kg_platform.embeddings.tokens import read_token_file, require_spec

    def parts():
        for path in paths:
            tokens = read_token_file(str(path))
            require_spec(tokens, spec, str(path))
            yield tokens.ids, tokens.lengths

    stats = FeederStats()
    sync(encoder.device)
    started, cpu = time.perf_counter(), time.process_time()
    kept: list[np.ndarray] = []
    rows = 0
    for block in embed_tokens(encoder, parts(), settings, stats):
        if rows < keep:
            kept.append(block[: keep - rows].copy())
        rows += len(block)
    sync(encoder.device)
    vectors = np.concatenate(kept) if kept else np.zeros((0, encoder.dim), np.float16)
    seconds, cpu = time.perf_counter() - started, time.process_time() - cpu
    detail = {
        "seconds": round(seconds, 3),
        # this process's CPU seconds: on a loaded machine the wall clock counts other work
        "cpu_seconds": round(cpu, 3),
        "texts_per_cpu_s": round(rows / cpu, 1),
        "super_batches": stats.super_batches,
        "padding_overhead": round(stats.padding_overhead, 4),
        "warm_up_shapes": stats.extra.get("warm_up_shapes", 0),
        "mean_tokens": round(stats.tokens / max(1, stats.texts), 1),
    }
    return rows / seconds, vectors, detail


def agreement(model_path: str, texts: list[str], vectors: np.ndarray, max_length: int) -> dict:
    """Cosine of the path's vectors against the CPU's fp32 vectors of the same texts."""
    from kg_platform.embeddings.encoder import Encoder

    cpu = Encoder(model_path, device="cpu", batch_size=32, max_length=max_length)
    expected = cpu.encode(texts)
    got = vectors[: len(texts)].astype(np.float32)
    cosines = (got * expected).sum(1) / (
        np.linalg.norm(got, axis=1) * np.linalg.norm(expected, axis=1)
    )
    return {"texts": len(texts), "min_cosine": round(float(cosines.min()), 6)}


def main() -> None:
    import torch

    from kg_platform.embeddings.encoder import Encoder, pick_device, read_model_layout
    from kg_platform.embeddings.feeder import FeederSettings
    from kg_platform.embeddings.tokenising import spec_from_folder

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, help="texts (default 200,000; 2,000 on a CPU model)")
    parser.add_argument("--model", default="", help="local model folder (default: packaged)")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--batch", type=int, help="default 512 on CUDA, 64 on CPU")
    parser.add_argument("--files", type=int, default=8, help="token files the texts fill")
    parser.add_argument("--super-batch", type=int, default=65_536)
    parser.add_argument("--agree", type=int, default=256, help="texts compared with the CPU")
    parser.add_argument("--work", help="folder for the token files (default: a temporary one)")
    parser.add_argument(
        "--null-model",
        action="store_true",
        help="a model returning zeros at once (CPU, one thread): the feed alone",
    )
    parser.add_argument(
        "--data", default=os.environ.get("KG_REFERENCE_DATA", str(REPO.parent / "shared" / "data"))
    )
    args = parser.parse_args()

    layout = read_model_layout(args.model)
    spec = spec_from_folder(layout.path, layout.max_length)
    unique = reference_texts(Path(args.data))
    if args.null_model:
        torch.set_num_threads(1)
        device = "cpu"
    else:
        device = pick_device(args.device)
    cuda = device.startswith("cuda")
    n = args.n or (200_000 if cuda or args.null_model else 2_000)
    batch = args.batch or (512 if cuda or args.null_model else 64)
    print(json.dumps({"phase": "setup", "device": device, "texts": n, "batch": batch,
                      "unique_texts": len(unique), "model": str(layout.path),
                      "tokenizer": spec.key, "null_model": args.null_model}), flush=True)  # fmt: skip

    tokenised = measure_tokenising(spec, unique)
    ids, lengths = tokenised.pop("ids"), tokenised.pop("lengths")
    print(json.dumps({"phase": "tokenising", **tokenised}), flush=True)

    with tempfile.TemporaryDirectory(prefix="kg-embed-bench-") as scratch:
        folder = Path(args.work or scratch)
        folder.mkdir(parents=True, exist_ok=True)
        written = write_token_files(spec, ids, lengths, n, args.files, folder)
        # the unique texts once, as their own file: the bytes a record costs on disk
        (folder / "unique").mkdir(exist_ok=True)
        one = write_token_files(spec, ids, lengths, len(unique), 1, folder / "unique")
        sizes = {
            "bytes_per_record": round(one["bytes"] / len(unique), 1),
            "gb_per_million_records": round(one["bytes"] / len(unique) * 1e6 / 1e9, 3),
            "files": args.files,
        }
        print(json.dumps({"phase": "token_files", **sizes}), flush=True)

        settings = FeederSettings(batch_size=batch, super_batch=args.super_batch, workers=0)
        result: dict = {"device": device, "texts": n, "batch": batch, "tokenising": tokenised,
                        "token_files": sizes}  # fmt: skip
        if args.null_model:
            model = NullModel(spec)
            path, _, detail = measure_path(model, spec, written["paths"], settings, 0)
            result.update(null_model_feed_texts_per_s=round(path, 1), feed=detail,
                          torch_threads=torch.get_num_threads())  # fmt: skip
            print(json.dumps(result))
            return

        encoder = Encoder(args.model, device=device, batch_size=batch)
        ceiling = measure_ceiling(
            encoder, 1024 if cuda else batch, 256, 20_000 if cuda else 4 * batch
        )
        print(json.dumps({"phase": "ceiling", "texts_per_s": round(ceiling, 1)}), flush=True)
        first, second = measure_model_alone(encoder, ids, lengths, n, batch)
        print(json.dumps({"phase": "model_alone", "first_pass": round(first, 1),
                          "second_pass": round(second, 1)}), flush=True)  # fmt: skip
        # the first rows of the path are the first unique texts: compare no more than both hold
        compared = min(args.agree, n, len(unique))
        path, vectors, detail = measure_path(encoder, spec, written["paths"], settings, compared)
        print(json.dumps({"phase": "path", "texts_per_s": round(path, 1), **detail}), flush=True)
        agree = agreement(str(layout.path), unique[:compared], vectors, encoder.max_length)
        result.update(
            ceiling_texts_per_s=round(ceiling, 1),
            model_alone_first_pass_texts_per_s=round(first, 1),
            model_alone_second_pass_texts_per_s=round(second, 1),
            path_texts_per_s=round(path, 1),
            path_over_ceiling=round(path / ceiling, 3),
            path_over_model_alone=round(path / second, 3),
            path=detail,
            agreement_with_cpu=agree,
            hours_for_28_3m_abstracts=round(28.3e6 / path / 3600, 3),
        )
        print(json.dumps(result))


if __name__ == "__main__":
    main()
