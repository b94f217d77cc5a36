"""The feeder: keeps the model busy on a large stream of texts.

- Texts are cut into chunks and tokenised by worker processes while the model runs, a
  bounded number of chunks ahead (memory stays flat however long the stream is).
- Tokenised chunks are gathered into super-batches of many thousand texts, which may span
  many files; inside a super-batch texts are sorted by token length so each batch pads to
  nearly its own length instead of the longest text in the stream.
- On CUDA, batches are staged in pinned host buffers and copied asynchronously, results come
  back through pinned memory, and the copy of one super-batch overlaps the next one's work.

Workers are started with ``spawn``, never ``fork``; see ``tokenising`` for why.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import time
from collections import deque
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from itertools import islice
from typing import Any

import numpy as np

from kg_platform.embeddings.encoder import Encoder
from kg_platform.embeddings.tokenising import (
    init_worker,
    load_tokenizer,
    tokenise_chunk,
    tokenise_with,
)


class FeederError(ValueError):
    """Feeder settings or inputs that cannot work, named with what is wrong."""


def default_workers() -> int:
    """One tokeniser per spare core, at most 14: beyond that the model is the bottleneck."""
    return max(1, min(14, (os.cpu_count() or 2) - 1))


@dataclass(frozen=True)
class FeederSettings:
    batch_size: int = 256
    super_batch: int = 16384  # texts sorted together by length
    chunk: int = 512  # texts per tokenisation task
    workers: int | None = None  # None: default_workers(); 0: tokenise in this process
    prefetch_super_batches: int = 2

    def __post_init__(self) -> None:
        for name in ("batch_size", "super_batch", "chunk", "prefetch_super_batches"):
            if getattr(self, name) < 1:
                raise FeederError(f"{name}={getattr(self, name)}: must be at least 1")
        if self.workers is not None and self.workers < 0:
            raise FeederError(f"workers={self.workers}: must be 0 (in process) or more")

    @property
    def resolved_workers(self) -> int:
        return default_workers() if self.workers is None else self.workers


@dataclass
class FeederStats:
    """Counters a caller can pass in to see where the time went (mutable: it accumulates)."""

    texts: int = 0
    tokens: int = 0
    padded_tokens: int = 0
    super_batches: int = 0
    seconds: float = 0.0
    waiting_for_tokens_s: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def padding_overhead(self) -> float:
        return self.padded_tokens / self.tokens - 1.0 if self.tokens else 0.0


def embed_texts(
    encoder: Encoder,
    texts: Sequence[str],
    settings: FeederSettings | None = None,
    stats: FeederStats | None = None,
) -> np.ndarray:
    """Unit vectors (float16, one row per text, input order) for any number of texts."""
    out = np.empty((len(texts), encoder.dim), dtype=np.float16)
    row = 0
    for block in embed_stream(encoder, texts, settings, stats):
        out[row : row + len(block)] = block
        row += len(block)
    if row != len(texts):
        raise RuntimeError(f"feeder returned {row} vectors for {len(texts)} texts")
    return out


def embed_stream(
    encoder: Encoder,
    texts: Iterable[str],
    settings: FeederSettings | None = None,
    stats: FeederStats | None = None,
) -> Iterator[np.ndarray]:
    """Vectors for a stream of texts, yielded as consecutive float16 blocks in input order
    (one block per super-batch), so a caller can slice them back to files by count."""
    settings = settings or FeederSettings()
    stats = stats if stats is not None else FeederStats()
    started = time.perf_counter()
    chunks = _chunks(iter(texts), settings.chunk)
    chunks_per_super = -(-settings.super_batch // settings.chunk)
    window = chunks_per_super * settings.prefetch_super_batches + settings.resolved_workers
    stage = _DeviceStage(encoder, settings.batch_size)
    with _Tokenisers(encoder.tokenizer_json(), settings.resolved_workers) as tokenisers:
        pending: deque[Any] = deque()

        def refill() -> None:
            while len(pending) < window:
                chunk = next(chunks, None)
                if chunk is None:
                    return
                pending.append(tokenisers.submit(chunk))

        refill()
        in_flight: _PendingResult | None = None
        while pending:
            parts: list[tuple[np.ndarray, np.ndarray]] = []
            count = 0
            while pending and count < settings.super_batch:
                waited = time.perf_counter()
                flat, lengths = tokenisers.result(pending.popleft())
                stats.waiting_for_tokens_s += time.perf_counter() - waited
                parts.append((flat, lengths))
                count += len(lengths)
                refill()
            launched = stage.launch(parts, stats)
            stats.super_batches += 1
            # hand back the previous super-batch only now: its copy ran behind this launch
            if in_flight is not None:
                yield in_flight.wait()
            in_flight = launched
        if in_flight is not None:
            yield in_flight.wait()
    stats.seconds += time.perf_counter() - started


def _chunks(texts: Iterator[str], size: int) -> Iterator[list[str]]:
    position = 0
    while chunk := list(islice(texts, size)):
        for i, t in enumerate(chunk):
            if not isinstance(t, str):
                raise FeederError(f"texts[{position + i}]: expected str, got {type(t).__name__}")
        position += len(chunk)
        yield chunk


class _Tokenisers:
    """Tokenisation in spawned worker processes, or in this process when workers == 0."""

    def __init__(self, tokenizer_json: str, workers: int) -> None:
        self.workers = workers
        self.pool = None
        self.local = None
        if workers == 0:
            self.local = load_tokenizer(tokenizer_json)
        else:
            # spawn, not fork: a fork after this process used the Rust tokenizer's thread
            # pool (or CUDA) can hang silently; see kg_platform.embeddings.tokenising
            context = mp.get_context("spawn")
            self.pool = context.Pool(workers, initializer=init_worker, initargs=(tokenizer_json,))

    def submit(self, texts: list[str]) -> Any:
        if self.pool is None:
            return tokenise_with(self.local, texts)
        return self.pool.apply_async(tokenise_chunk, (texts,))

    def result(self, handle: Any) -> tuple[np.ndarray, np.ndarray]:
        return handle if self.pool is None else handle.get()

    def __enter__(self) -> _Tokenisers:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.pool is not None:
            self.pool.terminate()
            self.pool.join()


class _PendingResult:
    def __init__(self, host: Any, order: np.ndarray, event: Any) -> None:
        self.host, self.order, self.event = host, order, event

    def wait(self) -> np.ndarray:
        if self.event is not None:
            self.event.synchronize()
        sorted_rows = self.host.numpy() if hasattr(self.host, "numpy") else self.host
        # back from length order to input order
        out = np.empty_like(sorted_rows)
        out[self.order] = sorted_rows
        return out


class _DeviceStage:
    """Pads length-sorted batches, moves them to the device and runs the model."""

    def __init__(self, encoder: Encoder, batch_size: int, staging_buffers: int = 3) -> None:
        import torch

        self.torch = torch
        self.encoder = encoder
        self.batch_size = batch_size
        self.cuda = encoder.device.startswith("cuda")
        self.buffers: list[tuple[Any, Any]] = []  # (pinned ids, event guarding reuse)
        if self.cuda:
            for _ in range(staging_buffers):
                ids = torch.empty(batch_size * encoder.max_length, dtype=torch.int64)
                self.buffers.append((ids.pin_memory(), None))
        self.next_buffer = 0

    def _to_device(self, ids: np.ndarray) -> Any:
        torch = self.torch
        if not self.cuda:
            return torch.from_numpy(ids).to(self.encoder.device)
        slot = self.next_buffer
        self.next_buffer = (slot + 1) % len(self.buffers)
        pinned, event = self.buffers[slot]
        if event is not None:
            event.synchronize()  # the copy that last read this buffer has finished
        rows, cols = ids.shape
        # a contiguous prefix of the flat buffer, so the copy stays one pinned DMA
        view = pinned[: rows * cols].view(rows, cols)
        view.numpy()[...] = ids
        on_device = view.to(self.encoder.device, non_blocking=True)
        done = torch.cuda.Event()
        done.record()
        self.buffers[slot] = (pinned, done)
        return on_device

    def launch(
        self, parts: list[tuple[np.ndarray, np.ndarray]], stats: FeederStats
    ) -> _PendingResult:
        torch = self.torch
        flat = np.concatenate([p[0] for p in parts])
        lengths = np.concatenate([p[1] for p in parts])
        offsets = np.zeros(len(lengths), dtype=np.int64)
        np.cumsum(lengths[:-1], out=offsets[1:])
        # longest first, so the largest batch allocates device memory first
        order = np.argsort(-lengths, kind="stable")
        device = self.encoder.device
        result = torch.empty(
            (len(lengths), self.encoder.dim), dtype=self.encoder.dtype, device=device
        )
        pad_id = self.encoder.pad_id
        for start in range(0, len(order), self.batch_size):
            rows = order[start : start + self.batch_size]
            row_lengths = lengths[rows]
            width = int(row_lengths.max())
            columns = np.arange(width)
            inside = columns[None, :] < row_lengths[:, None]
            ids = np.full((len(rows), width), pad_id, dtype=np.int64)
            ids[inside] = flat[(offsets[rows][:, None] + columns[None, :])[inside]]
            ids_device = self._to_device(ids)
            # the mask is rebuilt on the device from the lengths: half the bytes to copy
            lengths_device = torch.from_numpy(row_lengths.astype(np.int64)).to(
                device, non_blocking=self.cuda
            )
            mask = (torch.arange(width, device=device)[None, :] < lengths_device[:, None]).to(
                torch.int64
            )
            result[start : start + len(rows)] = self.encoder.embed_token_batch(ids_device, mask)
            stats.padded_tokens += len(rows) * width
        stats.texts += len(lengths)
        stats.tokens += int(lengths.sum())
        if not self.cuda:
            return _PendingResult(result.to(torch.float16).numpy(), order, None)
        host = torch.empty(result.shape, dtype=torch.float16, pin_memory=True)
        host.copy_(result, non_blocking=True)
        done = torch.cuda.Event()
        done.record()
        return _PendingResult(host, order, done)
