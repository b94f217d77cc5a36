import os
import signal
import time
from pathlib import Path

import numpy as np
import pytest

from kg_platform.embeddings.feeder import (
    FeederError,
    FeederSettings,
    FeederStats,
    _Tokenisers,
    embed_stream,
    embed_texts,
)
from kg_platform_tests.embeddings.models import packaged_encoder, scifact_abstracts, tiny_encoder


def _texts(n: int) -> list[str]:
    # real abstracts and their short titles interleaved: lengths vary from ~10 to the cap
    out = []
    for _, title, abstract in scifact_abstracts(n // 2):
        out += [f"{title} {abstract}", title]
    return out


@pytest.mark.timeout(300)
@pytest.mark.parametrize("workers", [0, 2])
def test_feeder_matches_plain_encode_in_input_order(workers):
    encoder = packaged_encoder()
    texts = _texts(8)
    expected = encoder.encode(texts)
    stats = FeederStats()
    # super-batches smaller than the input and chunks smaller than a batch: rows cross
    # chunk, batch and super-batch boundaries and must still come back in input order
    settings = FeederSettings(batch_size=4, super_batch=5, chunk=3, workers=workers)
    vectors = embed_texts(encoder, texts, settings, stats)
    assert vectors.dtype == np.float16
    assert vectors.shape == (8, 384)
    np.testing.assert_allclose(vectors.astype(np.float32), expected, atol=2e-3)
    assert stats.texts == 8
    assert stats.super_batches == 2  # whole chunks of 3 gather to at least 5 texts: 6 + 2


@pytest.mark.parametrize("step", [1, 16])
def test_padding_follows_length_sorted_batches_within_each_super_batch(step):
    encoder = tiny_encoder()
    texts = _texts(16)
    lengths = np.array(
        [
            len(ids)
            for ids in encoder.tokenizer(texts, truncation=True, max_length=encoder.max_length)[
                "input_ids"
            ]
        ]
    )
    stats = FeederStats()
    settings = FeederSettings(batch_size=3, super_batch=8, chunk=8, workers=0, width_step=step)
    embed_texts(encoder, texts, settings, stats)

    def width(longest: int) -> int:
        # rounded up to the step, never past the model's maximum (64 for the tiny BERT)
        return min(-(-longest // step) * step, encoder.max_length)

    expected_padded = 0
    for start in (0, 8):
        sorted_lengths = np.sort(lengths[start : start + 8])[::-1]
        expected_padded += sum(
            width(int(sorted_lengths[i : i + 3].max())) * len(sorted_lengths[i : i + 3])
            for i in range(0, 8, 3)
        )
    assert stats.tokens == int(lengths.sum())
    assert stats.padded_tokens == expected_padded
    assert expected_padded == {1: 816, 16: 832}[step]
    # unsorted batches of three in input order would pad far more
    unsorted = sum(int(lengths[i : i + 3].max()) * len(lengths[i : i + 3]) for i in range(0, 16, 3))
    assert expected_padded < unsorted


@pytest.mark.timeout(300)
def test_spawned_workers_do_not_hang_after_the_parent_used_the_tokenizer_pool(monkeypatch):
    # The reference hit this: fork after the Rust tokenizer's thread pool had run, and every
    # worker blocked forever. Use the pool here first, then start workers.
    monkeypatch.delenv("TOKENIZERS_PARALLELISM", raising=False)
    encoder = packaged_encoder()
    warm = [f"{t} {a}" for _, t, a in scifact_abstracts(40)]
    encoder.tokenizer(warm, truncation=True)  # a batch call runs the parallel pool
    texts = [t for _, t, _ in scifact_abstracts(6)]
    vectors = embed_texts(encoder, texts, FeederSettings(batch_size=2, chunk=1, workers=2))
    np.testing.assert_allclose(vectors.astype(np.float32), encoder.encode(texts), atol=2e-3)


def deaf_and_busy(pid_file: str) -> None:
    # a task for a tokeniser worker: from now on SIGTERM does not end it, and it stays busy
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    Path(pid_file + ".part").write_text(str(os.getpid()))
    os.replace(pid_file + ".part", pid_file)
    time.sleep(600)


@pytest.mark.timeout(120)
def test_a_worker_that_ignores_sigterm_is_killed_and_named_not_waited_for(tmp_path):
    # Pool.terminate joins its SIGTERMed workers with no deadline: CI once sat 300 s there
    tokenisers = _Tokenisers(tiny_encoder().tokenizer_json(), workers=2, grace_s=1.0)
    workers = list(tokenisers.pool._pool)
    pid_file = tmp_path / "deaf.pid"
    tokenisers.pool.apply_async(deaf_and_busy, (str(pid_file),))
    flat, lengths = tokenisers.result(tokenisers.submit(["alpha beta", "gamma"]))
    assert len(lengths) == 2 and int(lengths.sum()) == len(flat)
    while not pid_file.exists():
        time.sleep(0.05)
    deaf = int(pid_file.read_text())
    assert deaf in {p.pid for p in workers}
    with pytest.warns(RuntimeWarning, match=rf"worker pid\(s\) {deaf} still alive 1 s after"):
        tokenisers.__exit__(None, None, None)
    codes = {p.pid: p.exitcode for p in workers}
    assert codes.pop(deaf) == -signal.SIGKILL
    # the other one ended on the pool's own sentinel or on its SIGTERM, whichever came first
    assert list(codes.values())[0] in (0, -signal.SIGTERM)


def test_a_stream_of_unknown_length_comes_back_as_consecutive_blocks():
    encoder = tiny_encoder()
    texts = [t for _, t, _ in scifact_abstracts(7)]
    blocks = list(
        embed_stream(
            encoder, iter(texts), FeederSettings(batch_size=2, super_batch=3, chunk=2, workers=0)
        )
    )
    assert [len(b) for b in blocks] == [4, 3]
    np.testing.assert_allclose(
        np.concatenate(blocks).astype(np.float32), encoder.encode(texts), atol=2e-3
    )
    assert list(embed_stream(encoder, iter([]), FeederSettings(workers=0))) == []


def test_bad_settings_and_inputs_are_named():
    with pytest.raises(FeederError, match="batch_size=0"):
        FeederSettings(batch_size=0)
    with pytest.raises(FeederError, match="workers=-1"):
        FeederSettings(workers=-1)
    with pytest.raises(FeederError, match=r"texts\[2\]: expected str, got NoneType"):
        embed_texts(tiny_encoder(), ["a", "b", None], FeederSettings(workers=0))
