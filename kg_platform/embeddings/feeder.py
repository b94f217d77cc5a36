"""The feeder: keeps the model busy on a large stream of texts.

- Texts are cut into chunks and tokenised by worker processes while the model runs, a
  bounded number of chunks ahead (memory stays flat however long the stream is).
- Tokenised chunks are gathered into super-batches of many thousand texts, which may span
  many files; inside a super-batch texts are sorted by token length so each batch pads to
  nearly its own length instead of the longest text in the stream, rounded up to one of a
  few fixed widths (multiples of 16), every one of which runs once before the first batch.
- On CUDA, batches are staged in pinned host buffers and copied asynchronously, results come
  back through pinned memory, and the copy of one super-batch overlaps the next one's work.
- ``embed_tokens`` is the same path from ids tokenised earlier (token files, see
  ``tokens``): no tokeniser at all, which is what ``embedding_shards`` runs.

Workers are started with ``spawn``, never ``fork``; see ``tokenising`` for why.
"""

from __future__ import annotations

import bisect
import multiprocessing as mp
import os
import threading
import time
import warnings
from collections import deque
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from itertools import islice
from multiprocessing.connection import wait as ready
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
    width_step: int = 16  # batch widths rounded up to a multiple of this (1: not rounded)
    warm_up: bool | None = None  # every shape once before the first batch; None: on CUDA
    staging_buffers: int = 4  # pinned batches the host may run ahead of the device (CUDA)

    def __post_init__(self) -> None:
        for name in (
            "batch_size",
            "super_batch",
            "chunk",
            "prefetch_super_batches",
            "width_step",
            "staging_buffers",
        ):
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
    stage = _DeviceStage(encoder, settings)
    with _Tokenisers(encoder.tokenizer_json(), settings.resolved_workers) as tokenisers:
        pending: deque[Any] = deque()

        def refill() -> None:
            while len(pending) < window:
                chunk = next(chunks, None)
                if chunk is None:
                    return
                pending.append(tokenisers.submit(chunk))

        def super_batches() -> Iterator[list[tuple[np.ndarray, np.ndarray]]]:
            # whole tokenised chunks until a super-batch is full
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
                yield parts

        refill()
        yield from _launched_in_turn(stage, super_batches(), stats)
    stats.seconds += time.perf_counter() - started


def _launched_in_turn(
    stage: _DeviceStage,
    super_batches: Iterable[list[tuple[np.ndarray, np.ndarray]]],
    stats: FeederStats,
) -> Iterator[np.ndarray]:
    """Each super-batch's vectors, launched one ahead: the previous super-batch is handed
    back only after the next one is launched, so its copy runs behind that launch."""
    in_flight: _PendingResult | None = None
    for parts in super_batches:
        launched = stage.launch(parts, stats)
        stats.super_batches += 1
        if in_flight is not None:
            yield in_flight.wait()
        in_flight = launched
    if in_flight is not None:
        yield in_flight.wait()


def _chunks(texts: Iterator[str], size: int) -> Iterator[list[str]]:
    position = 0
    while chunk := list(islice(texts, size)):
        for i, t in enumerate(chunk):
            if not isinstance(t, str):
                raise FeederError(f"texts[{position + i}]: expected str, got {type(t).__name__}")
        position += len(chunk)
        yield chunk


# Seconds the pool's own terminate may take before its workers are killed outright.
TERMINATE_GRACE_S = 20.0


def terminate_pool(pool: Any, grace_s: float = TERMINATE_GRACE_S) -> None:
    """``pool.terminate()`` and ``pool.join()``, bounded in time.

    ``Pool.terminate`` sends SIGTERM to its workers and then joins each one with no deadline: a
    worker that does not end on SIGTERM holds the caller forever (CI once sat 300 s there). So
    the terminate runs in a helper thread; whatever workers are still alive after ``grace_s``
    are killed (SIGKILL) with a warning naming their pids, and the terminate then finishes
    on its own: its joins return once the workers are gone."""
    workers = list(pool._pool)  # the pool's processes; terminate replaces none of them
    closer = threading.Thread(target=pool.terminate, name="tokeniser-pool-terminate", daemon=True)
    closer.start()
    closer.join(grace_s)
    if closer.is_alive():
        stuck = [p for p in workers if not ready([p.sentinel], 0)]
        if stuck:
            warnings.warn(
                f"tokeniser pool: worker pid(s) {', '.join(str(p.pid) for p in stuck)} still "
                f"alive {grace_s:g} s after SIGTERM; killing them (SIGKILL)",
                RuntimeWarning,
                stacklevel=2,
            )
            for p in stuck:
                p.kill()
        closer.join(grace_s)
        if closer.is_alive():
            warnings.warn(
                f"tokeniser pool: terminate still blocked {grace_s:g} s after its workers "
                "were killed; leaving it behind",
                RuntimeWarning,
                stacklevel=2,
            )
            return
    pool.join()


class _Tokenisers:
    """Tokenisation in spawned worker processes, or in this process when workers == 0."""

    def __init__(
        self, tokenizer_json: str, workers: int, grace_s: float = TERMINATE_GRACE_S
    ) -> None:
        self.workers = workers
        self.grace_s = grace_s
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
            terminate_pool(self.pool, self.grace_s)


def embed_tokens(
    encoder: Encoder,
    parts: Iterable[tuple[np.ndarray, np.ndarray]],
    settings: FeederSettings | None = None,
    stats: FeederStats | None = None,
) -> Iterator[np.ndarray]:
    """Vectors for texts already tokenised: ``parts`` are consecutive (flat ids, lengths)
    pairs (a token file each, say). Yields float16 blocks in input order, one per
    super-batch of ``settings.super_batch`` texts, cut across part boundaries."""
    settings = settings or FeederSettings()
    stats = stats if stats is not None else FeederStats()
    started = time.perf_counter()
    stage = _DeviceStage(encoder, settings)
    yield from _launched_in_turn(stage, _super_batches(parts, settings.super_batch), stats)
    stats.seconds += time.perf_counter() - started


def _super_batches(
    parts: Iterable[tuple[np.ndarray, np.ndarray]], size: int
) -> Iterator[list[tuple[np.ndarray, np.ndarray]]]:
    """Consecutive pieces (views of the parts' flat ids and lengths) of exactly ``size``
    texts together (the last ones fewer)."""
    held: list[tuple[np.ndarray, np.ndarray]] = []
    count = 0
    for flat, lengths in parts:
        if len(lengths) != 0 and int(lengths.sum(dtype=np.int64)) != len(flat):
            raise FeederError(f"{len(flat)} ids for lengths summing to {int(lengths.sum())}")
        position = 0  # rows of this part already handed on
        offset = 0  # its ids already handed on
        while len(lengths) - position > 0:
            take = min(size - count, len(lengths) - position)
            piece = lengths[position : position + take]
            tokens = int(piece.sum(dtype=np.int64))
            held.append((flat[offset : offset + tokens], piece))
            count += take
            position += take
            offset += tokens
            if count == size:
                yield held
                held, count = [], 0
    if count:
        yield held


def batch_widths(max_length: int, step: int) -> list[int]:
    """The widths batches are padded to: multiples of ``step`` up to ``max_length``, and
    ``max_length`` itself (``step`` 1: every width, as the texts need)."""
    if step <= 1:
        return list(range(1, max_length + 1))
    return sorted({*range(step, max_length + 1, step), max_length})


class _PendingResult:
    """A super-batch's vectors in input order, on their way to the host."""

    def __init__(self, host: Any, event: Any, keep: Any = None) -> None:
        # keep: a pinned buffer an asynchronous copy may still read
        self.host, self.event, self.keep = host, event, keep

    def wait(self) -> np.ndarray:
        if self.event is not None:
            self.event.synchronize()
        return self.host.numpy()


class _DeviceStage:
    """Pads length-sorted batches to a few fixed widths, moves them to the device and runs
    the model.

    - Widths are rounded up to ``settings.width_step`` (16: at most 16 shapes for a maximum
      of 256), so the device sees few shapes; with ``warm_up`` each shape (rows =
      ``batch_size``) runs once before the first real batch, and a super-batch's last,
      short batch is filled up to ``batch_size`` rows with one-token dummies whose vectors
      are dropped: no shape is ever new in the middle of the stream.
    - A batch is gathered straight from the flat ids (one row copy each, through a sliding
      window view, copied into a pinned host buffer on CUDA), copied asynchronously, and its padding
      (the ids past each row's length) is blanked on the device, where the mask is built
      from the lengths. A buffer is reused only after the copy that read it finished, so the
      host runs ``staging_buffers`` batches ahead of the device and neither waits on the
      other.
    """

    def __init__(self, encoder: Encoder, settings: FeederSettings) -> None:
        import torch

        self.torch = torch
        self.encoder = encoder
        self.batch_size = settings.batch_size
        self.cuda = encoder.device.startswith("cuda")
        self.widths = batch_widths(encoder.max_length, settings.width_step)
        self.warm_up = self.cuda if settings.warm_up is None else settings.warm_up
        self.buffers: list[tuple[Any, Any, Any]] = []  # (pinned ids, pinned lengths, event)
        if self.cuda:
            for _ in range(settings.staging_buffers):
                ids = torch.empty(self.batch_size * encoder.max_length, dtype=torch.int32)
                lengths = torch.empty(self.batch_size, dtype=torch.int32)
                self.buffers.append((ids.pin_memory(), lengths.pin_memory(), None))
        self.next_buffer = 0
        self.arange = torch.arange(encoder.max_length, device=encoder.device)

    def _warm(self, stats: FeederStats) -> None:
        """Every (batch_size, width) shape once, before any real batch (once per encoder)."""
        torch = self.torch
        seen: set = self.encoder.__dict__.setdefault("_warm_shapes", set())
        shapes = [(self.batch_size, w) for w in self.widths if (self.batch_size, w) not in seen]
        for rows, width in shapes:
            ids = torch.full((rows, width), self.encoder.pad_id, device=self.encoder.device)
            self.encoder.embed_token_batch(ids, torch.ones_like(ids))
            seen.add((rows, width))
        if self.cuda:
            torch.cuda.synchronize()
        stats.extra["warm_up_shapes"] = stats.extra.get("warm_up_shapes", 0) + len(shapes)

    def _width(self, longest: int) -> int:
        return self.widths[bisect.bisect_left(self.widths, longest)]

    def _to_device(self, windows: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> Any:
        """(ids, lengths) of one batch on the device: rows of ``windows`` at ``starts``."""
        torch = self.torch
        rows, width = len(starts), windows.shape[1]
        # fancy indexing copies each row's window; np.take would copy the whole view first
        if not self.cuda:
            return torch.from_numpy(windows[starts]), torch.from_numpy(lengths)
        slot = self.next_buffer
        self.next_buffer = (slot + 1) % len(self.buffers)
        pinned, pinned_lengths, event = self.buffers[slot]
        if event is not None:
            event.synchronize()  # the copy that last read this buffer has finished
        # a contiguous prefix of the flat buffer, so the copy stays one pinned DMA
        view = pinned[: rows * width].view(rows, width)
        view.numpy()[...] = windows[starts]
        pinned_lengths[:rows].numpy()[...] = lengths
        device = self.encoder.device
        on_device = view.to(device, non_blocking=True)
        lengths_device = pinned_lengths[:rows].to(device, non_blocking=True)
        done = torch.cuda.Event()
        done.record()
        self.buffers[slot] = (pinned, pinned_lengths, done)
        return on_device, lengths_device

    def launch(
        self, pieces: list[tuple[np.ndarray, np.ndarray]], stats: FeederStats
    ) -> _PendingResult:
        """Run one super-batch: ``pieces`` are consecutive (flat ids, lengths)."""
        torch = self.torch
        if self.warm_up:
            self._warm(stats)
        lengths = np.concatenate([p[1] for p in pieces]).astype(np.int64, copy=False)
        n = len(lengths)
        offsets = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        total = int(offsets[-1])
        # the ids (their own dtype: uint16 from token files), copied once from the pieces,
        # with a tail of pad ids, so every row's window of the widest width stays inside the
        # array; dummy rows start there
        pad_id = self.encoder.pad_id
        padded = np.empty(total + self.widths[-1], dtype=pieces[0][0].dtype)
        at = 0
        for flat, _ in pieces:
            padded[at : at + len(flat)] = flat
            at += len(flat)
        if at != total:
            raise FeederError(f"{at} ids for lengths summing to {total}")
        padded[total:] = pad_id
        dummy_start = total
        # longest first, so the largest batch allocates device memory first
        order = np.argsort(-lengths, kind="stable")
        device = self.encoder.device
        # each batch's vectors go straight to their rows in input order (index_copy_ on the
        # device), so the host never reorders them; the order goes over once, pinned
        order_host = torch.from_numpy(order)
        if self.cuda:
            order_host = order_host.pin_memory()
        order_device = order_host.to(device, non_blocking=self.cuda)
        result = torch.empty((n, self.encoder.dim), dtype=self.encoder.dtype, device=device)
        for start in range(0, n, self.batch_size):
            rows = order[start : start + self.batch_size]
            starts = offsets[rows]
            row_lengths = lengths[rows]
            real = len(rows)
            if self.warm_up and real < self.batch_size:
                extra = self.batch_size - real
                starts = np.concatenate([starts, np.full(extra, dummy_start, np.int64)])
                row_lengths = np.concatenate([row_lengths, np.ones(extra, np.int64)])
            width = self._width(int(row_lengths[0]))
            windows = np.lib.stride_tricks.sliding_window_view(padded, width)
            ids, lengths_device = self._to_device(windows, starts, row_lengths)
            beyond = self.arange[:width][None, :] >= lengths_device[:, None]
            # the window ran on into the next texts' ids: blank them to the pad id
            ids = ids.to(torch.int64).masked_fill_(beyond, pad_id)
            vectors = self.encoder.embed_token_batch(ids, beyond.logical_not().to(torch.int64))
            result.index_copy_(0, order_device[start : start + real], vectors[:real])
            stats.padded_tokens += len(starts) * width
        stats.texts += n
        stats.tokens += int(offsets[-1])
        if not self.cuda:
            return _PendingResult(result.to(torch.float16), None)
        host = torch.empty(result.shape, dtype=torch.float16, pin_memory=True)
        host.copy_(result, non_blocking=True)
        done = torch.cuda.Event()
        done.record()
        return _PendingResult(host, done, order_host)
