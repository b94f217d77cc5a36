"""A linear probe on a frozen encoder: the packaged MiniLM embeds the question and each
text separately, and a 3-way logistic regression reads features built from both vectors.

The encoder is never trained, so every reader that shares it (cross-fitting folds, the
shuffled-label seeds, the blind control) shares its embeddings: they are cached by the
sha256 of what was embedded, once per process. A text longer than the encoder's window is
read one of three ways (``ProbeRecipe.pooling``):

- ``first``: its first window only (the encoder's own truncation);
- ``windows``: consecutive windows of the encoder's length, each embedded alone, their
  vectors averaged and renormalised;
- ``sentences``: each sentence embedded alone (truncated to one window), averaged and
  renormalised;
- ``max``: the element-wise maximum of the last hidden states over every token of every
  window (not normalised; the question is still the encoder's pooled vector).

Every window and sentence is embedded alone (a batch of one, no padding, one torch thread),
so its vector is a function of its tokens only, never of what else shares a batch or of the
thread count: training is a function of (examples, seed, recipe) to the bit. The saved
probe is ``probe.json`` (weights as exact float reprs) and ``reader.json``; the encoder
itself is not copied, only its fingerprint is recorded and checked on load.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from kg_platform.answer.readers.base import (
    LABELS,
    LabelledQuestion,
    PairReader,
    check_pairs,
    check_posteriors,
    content_hash,
    label_indices,
    normalise_rows,
    training_set_hash,
    truncate,
)

READER_KIND = "probe"
MODEL_FILE = "probe.json"
METADATA_FILE = "reader.json"
POOLINGS = ("first", "windows", "sentences", "max")
# q: the question's vector, t: the text's, prod: q*t, diff: |q-t|, cos: their dot product
FEATURE_PARTS = ("q", "t", "prod", "diff", "cos")
# a sentence ends at . ! or ? followed by space and an upper-case letter or a digit
SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z0-9(\[])")


@dataclass(frozen=True)
class ProbeRecipe:
    """How the probe is trained. ``encoder`` "" is the packaged MiniLM."""

    encoder: str = ""
    # the defaults are the variant chosen by out-of-fold accuracy on DEV (the first 200
    # DEV400 questions by PMID; docs/BENCHMARKS.md, *Readers*, has the sweep)
    pooling: str = "max"
    features: tuple[str, ...] = ("t",)
    C: float = 0.03
    standardise: bool = True
    class_weight: str = ""  # "" or "balanced"
    truncation_chars: int = 3000
    # "context": the abstract without its conclusion; "results": its results sentences
    text_field: str = "context"
    max_iter: int = 5000

    def __post_init__(self) -> None:
        # a JSON recipe gives the features as a list
        object.__setattr__(self, "features", tuple(self.features))
        if self.pooling not in POOLINGS:
            raise ValueError(f"pooling {self.pooling!r}: expected one of {POOLINGS}")
        unknown = [p for p in self.features if p not in FEATURE_PARTS]
        if not self.features or unknown or len(set(self.features)) != len(self.features):
            raise ValueError(
                f"features {list(self.features)}: expected distinct parts of {FEATURE_PARTS}"
            )
        if self.C <= 0 or self.max_iter < 1 or self.truncation_chars < 0:
            raise ValueError(f"{self}: C > 0, max_iter >= 1 and truncation_chars >= 0 required")
        if self.class_weight not in ("", "balanced"):
            raise ValueError(f"class_weight {self.class_weight!r}: expected '' or 'balanced'")
        if self.text_field not in ("context", "results"):
            raise ValueError(f"text_field {self.text_field!r}: expected context or results")

    def to_dict(self) -> dict[str, Any]:
        values = asdict(self)
        values["features"] = list(self.features)
        return values


# -- the frozen encoder and its embedding cache ---------------------------------------------


class FrozenEncoder:
    """The encoder, read one window at a time, with a process-wide cache of vectors keyed
    by the sha256 of the window's token ids (so truncations of one text that share their
    first windows embed them once)."""

    def __init__(self, model_path: str) -> None:
        from kg_platform.embeddings.encoder import Encoder

        self.encoder = Encoder(model_path, device="cpu", batch_size=1)
        self.fingerprint = self.encoder.fingerprint
        self.window = self.encoder.max_length
        self.tokenizer = self.encoder.tokenizer
        self.vectors: dict[bytes, np.ndarray] = {}
        self.embedded = 0  # windows actually run through the encoder
        self.lock = threading.Lock()

    def _windows(self, text: str) -> list[list[int]]:
        """The token ids of ``text`` cut into consecutive windows of the encoder's length,
        each with the tokenizer's special tokens (one window for an empty text)."""
        encoded = self.tokenizer(
            text, truncation=True, max_length=self.window, return_overflowing_tokens=True
        )
        return [list(ids) for ids in encoded["input_ids"]]

    def _window_vector(self, ids: Sequence[int], kind: str = "mean") -> np.ndarray:
        """One window's vector: the encoder's own pooled unit vector (``mean``), or the
        element-wise maximum of its last hidden states over the window's tokens (``max``)."""
        import torch

        key = kind.encode() + hashlib.sha256(np.asarray(ids, dtype=np.int64).tobytes()).digest()
        with self.lock:
            found = self.vectors.get(key)
        if found is not None:
            return found
        input_ids = torch.tensor([list(ids)], dtype=torch.long, device=self.encoder.device)
        mask = torch.ones_like(input_ids)
        if kind == "max":
            with torch.inference_mode():
                hidden = self.encoder.model(input_ids=input_ids, attention_mask=mask)[0][0]
            # the text's tokens, without the special tokens around them when it has any
            tokens = hidden[1:-1] if hidden.shape[0] > 2 else hidden
            vector = tokens.float().max(dim=0).values.cpu().numpy()
        else:
            vector = self.encoder.embed_token_batch(input_ids, mask).to(torch.float32).cpu().numpy()
            vector = vector[0]
        vector = np.array(vector, dtype=np.float32)
        with self.lock:
            self.vectors[key] = vector
            self.embedded += 1
        return vector

    def embed(self, text: str, pooling: str) -> np.ndarray:
        """The text's vector (float32) under ``pooling``: a unit vector, except for ``max``
        (the maximum over every window's token states, unnormalised)."""
        if pooling == "max":
            maxima = np.stack([self._window_vector(w, "max") for w in self._windows(text)])
            return maxima.max(axis=0)
        if pooling == "sentences":
            sentences = [s for s in SENTENCE_END.split(text.strip()) if s] or [""]
            pieces = [self._windows(s)[0] for s in sentences]
        else:
            pieces = self._windows(text)
            if pooling == "first":
                pieces = pieces[:1]
        vectors = np.stack([self._window_vector(p) for p in pieces]).astype(np.float64)
        pooled = vectors.mean(axis=0)
        norm = float(np.linalg.norm(pooled))
        return (pooled / norm if norm > 0 else pooled).astype(np.float32)


_ENCODERS: dict[str, FrozenEncoder] = {}
_TEXT_VECTORS: dict[tuple[str, str, bytes], np.ndarray] = {}
_ENCODERS_LOCK = threading.Lock()


def frozen_encoder(model_path: str = "") -> FrozenEncoder:
    """The process's one loaded encoder for ``model_path`` ("" is the packaged MiniLM)."""
    from kg_platform.embeddings.encoder import packaged_model_path

    path = str(Path(model_path).absolute()) if model_path else str(packaged_model_path())
    with _ENCODERS_LOCK:
        if path not in _ENCODERS:
            _ENCODERS[path] = FrozenEncoder(path)
        return _ENCODERS[path]


def embed_texts(encoder: FrozenEncoder, texts: Sequence[str], pooling: str) -> np.ndarray:
    """(len(texts), dim) float32: each distinct text embedded once per process (cached by
    encoder, pooling and the text's sha256)."""
    out = np.zeros((len(texts), encoder.encoder.dim), dtype=np.float32)
    with one_torch_thread():
        for i, text in enumerate(texts):
            key = (encoder.fingerprint, pooling, hashlib.sha256(text.encode()).digest())
            vector = _TEXT_VECTORS.get(key)
            if vector is None:
                vector = _TEXT_VECTORS[key] = encoder.embed(text, pooling)
            out[i] = vector
    return out


@contextmanager
def one_torch_thread() -> Iterator[None]:
    """One torch thread for the block: a window of one is too small to share, threads that
    wait on a busy machine spin, and the vectors' bits never depend on the thread count."""
    import torch

    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(previous)


def clear_embedding_cache() -> None:
    """Forget every cached vector (the loaded encoders stay)."""
    _TEXT_VECTORS.clear()
    with _ENCODERS_LOCK:
        for encoder in _ENCODERS.values():
            encoder.vectors.clear()


def pair_features(q: np.ndarray | None, t: np.ndarray | None, parts: Sequence[str]) -> np.ndarray:
    """float64 (n, d): the requested parts of [q, t, q*t, |q-t|, q.t] side by side (``q`` or
    ``t`` may be None when no part reads it)."""
    q = None if q is None else np.asarray(q, dtype=np.float64)
    t = None if t is None else np.asarray(t, dtype=np.float64)
    made = {
        "q": lambda: q,
        "t": lambda: t,
        "prod": lambda: q * t,
        "diff": lambda: np.abs(q - t),
        "cos": lambda: (q * t).sum(axis=1, keepdims=True),
    }
    return np.hstack([made[p]() for p in parts])


# -- the reader -----------------------------------------------------------------------------


class ProbeReader(PairReader):
    """The frozen encoder and a fitted linear head; ``posteriors`` is the reader contract."""

    def __init__(
        self,
        recipe: ProbeRecipe,
        coef: np.ndarray,
        intercept: np.ndarray,
        mean: np.ndarray,
        scale: np.ndarray,
        metadata: dict[str, Any] | None = None,
        encoder: FrozenEncoder | None = None,
    ) -> None:
        self.recipe = recipe
        self.coef = np.asarray(coef, dtype=np.float64)
        self.intercept = np.asarray(intercept, dtype=np.float64)
        self.mean = np.asarray(mean, dtype=np.float64)
        self.scale = np.asarray(scale, dtype=np.float64)
        if self.coef.shape != (len(LABELS), self.mean.shape[0]):
            raise ValueError(f"probe: weights {self.coef.shape} for {self.mean.shape[0]} features")
        self.metadata = metadata or {}
        self.encoder = encoder or frozen_encoder(recipe.encoder)
        self.name = READER_KIND

    def features(self, questions: Sequence[str], texts: Sequence[str]) -> np.ndarray:
        texts = [truncate(t, self.recipe.truncation_chars) for t in texts]
        parts = set(self.recipe.features)
        # embed only what the features read: a text-only probe never embeds the question
        t = _embed_many(self.encoder, texts, self.recipe.pooling) if parts != {"q"} else None
        q = _embed_many(self.encoder, questions, "first") if parts != {"t"} else None
        return pair_features(q, t, self.recipe.features)

    def score_pairs(self, questions: Sequence[str], texts: Sequence[str]) -> np.ndarray:
        check_pairs(questions, texts, self.name)
        if not len(texts):
            return np.zeros((0, len(LABELS)), dtype=np.float32)
        x = (self.features(questions, texts) - self.mean) / self.scale
        logits = x @ self.coef.T + self.intercept
        logits -= logits.max(axis=1, keepdims=True)
        probs = np.exp(logits)
        return check_posteriors(normalise_rows(probs), len(texts), self.name)

    def save(self, folder: str | os.PathLike[str]) -> str:
        """Write ``probe.json`` and ``reader.json``; return the folder's content hash."""
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        weights = {
            "labels": list(LABELS),
            "coef": self.coef.tolist(),
            "intercept": self.intercept.tolist(),
            "mean": self.mean.tolist(),
            "scale": self.scale.tolist(),
        }
        (folder / MODEL_FILE).write_text(json.dumps(weights, sort_keys=True))
        (folder / METADATA_FILE).write_text(json.dumps(self.metadata, indent=2, sort_keys=True))
        return content_hash(folder)

    def __repr__(self) -> str:
        return f"ProbeReader({self.recipe.pooling}, {list(self.recipe.features)})"


def _embed_many(encoder: FrozenEncoder, texts: Sequence[str], pooling: str) -> np.ndarray:
    """Each distinct text of ``texts`` embedded once, rows in ``texts`` order."""
    distinct = list(dict.fromkeys(texts))
    vectors = embed_texts(encoder, distinct, pooling)
    row = {text: i for i, text in enumerate(distinct)}
    return vectors[[row[t] for t in texts]]


def load_probe_reader(folder: str | os.PathLike[str]) -> ProbeReader:
    """A probe saved by ``ProbeReader.save``; a ValueError names the folder when it is not
    one, or when its encoder is not the one it was trained on."""
    folder = Path(folder)
    try:
        metadata = json.loads((folder / METADATA_FILE).read_text())
        weights = json.loads((folder / MODEL_FILE).read_text())
        recipe = ProbeRecipe(**metadata["recipe"])
    except (OSError, json.JSONDecodeError, KeyError, TypeError) as exc:
        raise ValueError(f"{folder}: not a saved probe reader: {exc}") from exc
    if weights.get("labels") != list(LABELS):
        raise ValueError(f"{folder}: labels {weights.get('labels')}, expected {list(LABELS)}")
    encoder = frozen_encoder(recipe.encoder)
    if metadata.get("encoder") and metadata["encoder"] != encoder.fingerprint:
        raise ValueError(
            f"{folder}: trained on encoder {metadata['encoder']}, "
            f"but {recipe.encoder or 'the packaged encoder'} is {encoder.fingerprint}"
        )
    return ProbeReader(
        recipe,
        np.array(weights["coef"]),
        np.array(weights["intercept"]),
        np.array(weights["mean"]),
        np.array(weights["scale"]),
        metadata,
        encoder,
    )


def train_probe(
    examples: Sequence[LabelledQuestion], seed: int, recipe: ProbeRecipe
) -> ProbeReader:
    """Embed ``examples`` (question, then its text) with the frozen encoder and fit the
    logistic regression. lbfgs is deterministic; ``seed`` is recorded and given to it. The
    examples are read in qid order, so their input order does not change a bit."""
    import sklearn
    from sklearn.linear_model import LogisticRegression

    examples = sorted(examples, key=lambda ex: ex.qid)
    if len({ex.label for ex in examples}) < 2:
        raise ValueError(f"train_probe: {len(examples)} examples with fewer than 2 labels")
    encoder = frozen_encoder(recipe.encoder)
    blank = ProbeReader(
        recipe,
        np.zeros((len(LABELS), 1)),
        np.zeros(len(LABELS)),
        np.zeros(1),
        np.ones(1),
        encoder=encoder,
    )
    x = blank.features(
        [ex.question for ex in examples], [ex.text(recipe.text_field) for ex in examples]
    )
    if recipe.standardise:
        mean = x.mean(axis=0)
        scale = x.std(axis=0)
        scale[scale == 0] = 1.0
    else:
        mean, scale = np.zeros(x.shape[1]), np.ones(x.shape[1])
    y = label_indices(examples)
    model = LogisticRegression(
        C=recipe.C,
        max_iter=recipe.max_iter,
        random_state=seed,
        class_weight=recipe.class_weight or None,
    )
    model.fit((x - mean) / scale, y)
    # a label absent from the training set gets weight 0 and a very low intercept
    coef = np.zeros((len(LABELS), x.shape[1]))
    intercept = np.full(len(LABELS), -30.0)
    if len(model.classes_) == 2:  # binary: one row, for classes_[1]
        half = model.coef_[0] / 2
        rows = {model.classes_[0]: (-half, -model.intercept_[0] / 2)}
        rows[model.classes_[1]] = (half, model.intercept_[0] / 2)
    else:
        rows = {c: (model.coef_[i], model.intercept_[i]) for i, c in enumerate(model.classes_)}
    for label, (weights, bias) in rows.items():
        coef[int(label)], intercept[int(label)] = weights, bias
    metadata = {
        "reader": READER_KIND,
        "name": READER_KIND,
        "labels": list(LABELS),
        "encoder": encoder.fingerprint,
        "encoder_window": encoder.window,
        "seed": seed,
        "recipe": recipe.to_dict(),
        "training_set_hash": training_set_hash(examples),
        "n_train": len(examples),
        "n_features": int(x.shape[1]),
        "label_counts": {label: int((y == i).sum()) for i, label in enumerate(LABELS)},
        "iterations": int(np.max(model.n_iter_)),
        "sklearn_version": sklearn.__version__,
    }
    return ProbeReader(recipe, coef, intercept, mean, scale, metadata, encoder)
