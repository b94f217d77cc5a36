"""Cross-encoder classifier: a 3-way head on a local encoder, read on (question, text) pairs.

By default the base is the packaged all-MiniLM-L6-v2; any local Hugging Face folder works,
and so does a folder that already holds a sequence-classification model. Training is a
function of (examples, seed, recipe) and is reproducible to the bit on CPU: the seed drives
the head's initialisation, dropout and the batch order; deterministic algorithms are on
and the thread count can be pinned. A saved model is named by the sha256 of its files, and
its ``reader.json`` records the training-set hash, seed and recipe.
"""

from __future__ import annotations

import json
import os
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
from kg_platform.embeddings.encoder import packaged_model_path, pick_device, read_model_layout

METADATA_FILE = "reader.json"
READER_KIND = "cross-encoder"

__all__ = [
    "ClassifierRecipe",
    "CrossEncoderClassifier",
    "load_classifier",
    "train_classifier",
]


@dataclass(frozen=True)
class ClassifierRecipe:
    """How a classifier is trained. ``base_model`` "" is the packaged MiniLM."""

    base_model: str = ""
    epochs: int = 3
    learning_rate: float = 5e-5
    batch_size: int = 16
    max_length: int = 256
    truncation_chars: int = 3000
    # "left" drops the start of an over-long context and keeps its end, where the results are
    truncation_side: str = "left"
    weight_decay: float = 0.01
    warmup_fraction: float = 0.1
    max_grad_norm: float = 1.0
    torch_threads: int = 0  # 0 keeps torch's default; bits depend on it, so it is recorded

    def __post_init__(self) -> None:
        if self.epochs < 1 or self.batch_size < 1 or self.max_length < 8:
            raise ValueError(f"{self}: epochs, batch_size >= 1 and max_length >= 8 required")
        if self.truncation_side not in ("left", "right"):
            raise ValueError(f"truncation_side {self.truncation_side!r}: expected left or right")
        if not 0 <= self.warmup_fraction < 1:
            raise ValueError(f"warmup_fraction {self.warmup_fraction}: expected [0, 1)")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class CrossEncoderClassifier(PairReader):
    """A loaded or freshly trained classifier; ``posteriors`` is the reader contract."""

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        recipe: ClassifierRecipe,
        metadata: dict[str, Any],
        device: str = "cpu",
        batch_size: int = 64,
    ) -> None:
        self.model = model.to(device).eval()
        self.tokenizer = tokenizer
        self.recipe = recipe
        self.metadata = metadata
        self.device = device
        self.batch_size = batch_size
        self.max_length = _max_length(model, recipe.max_length)
        self.columns = _label_columns(model.config)
        self.name = str(metadata.get("name", READER_KIND))

    def score_pairs(self, questions: Sequence[str], texts: Sequence[str]) -> np.ndarray:
        """Posteriors of many (question, text) pairs at once, batched by length."""
        import torch

        check_pairs(questions, texts, self.name)
        texts = [truncate(t, self.recipe.truncation_chars) for t in texts]
        out = np.zeros((len(texts), len(LABELS)), dtype=np.float64)
        order = sorted(range(len(texts)), key=lambda i: len(questions[i]) + len(texts[i]))
        with torch.inference_mode():
            for start in range(0, len(order), self.batch_size):
                rows = order[start : start + self.batch_size]
                batch = self._encode([questions[i] for i in rows], [texts[i] for i in rows])
                logits = self.model(**batch).logits.double()
                probs = torch.softmax(logits, dim=-1).cpu().numpy()
                out[rows] = probs[:, self.columns]
        return check_posteriors(normalise_rows(out), len(texts), self.name)

    def _encode(self, questions: list[str], texts: list[str], padding: bool = True) -> Any:
        self.tokenizer.truncation_side = self.recipe.truncation_side
        batch = self.tokenizer(
            questions,
            texts,
            truncation="longest_first",
            max_length=self.max_length,
            padding=padding,
            return_tensors="pt" if padding else None,
        )
        return {k: v.to(self.device) for k, v in batch.items()} if padding else batch

    def save(self, folder: str | os.PathLike[str]) -> str:
        """Write weights, tokenizer and ``reader.json`` into ``folder``; return the
        content hash of what was written."""
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        self.model.save_pretrained(str(folder))
        self.tokenizer.save_pretrained(str(folder))
        (folder / METADATA_FILE).write_text(json.dumps(self.metadata, indent=2, sort_keys=True))
        return content_hash(folder)

    def __repr__(self) -> str:
        return f"CrossEncoderClassifier({self.name}, device={self.device})"


def load_classifier(
    folder: str | os.PathLike[str], device: str = "auto", batch_size: int = 64
) -> CrossEncoderClassifier:
    """A saved classifier, or any local Hugging Face sequence-classification folder with
    three labels (named yes/no/maybe in any order, or taken in ``LABELS`` order)."""
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    folder = Path(folder)
    layout = read_model_layout(folder)
    _quiet_transformers()
    try:
        tokenizer = AutoTokenizer.from_pretrained(str(folder))
        model = AutoModelForSequenceClassification.from_pretrained(str(folder))
    except (OSError, ValueError) as exc:
        raise ValueError(f"{folder}: cannot load a sequence classifier: {exc}") from exc
    if int(model.config.num_labels) != len(LABELS):
        raise ValueError(f"{folder}: {model.config.num_labels} labels, a reader needs 3")
    metadata_path = folder / METADATA_FILE
    if metadata_path.is_file():
        metadata = json.loads(metadata_path.read_text())
        recipe = ClassifierRecipe(**metadata["recipe"])
    else:
        recipe = ClassifierRecipe(base_model=str(folder), max_length=layout.max_length)
        metadata = {"reader": READER_KIND, "name": f"{READER_KIND}:{folder.name}"}
    return CrossEncoderClassifier(
        model, tokenizer, recipe, metadata, pick_device(device), batch_size=batch_size
    )


def train_classifier(
    examples: Sequence[LabelledQuestion],
    seed: int,
    recipe: ClassifierRecipe,
    device: str = "cpu",
) -> CrossEncoderClassifier:
    """Fine-tune ``recipe.base_model`` with a fresh 3-way head on (question, context)."""
    import torch
    import transformers
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    examples = list(examples)
    if not examples:
        raise ValueError("train_classifier: no examples")
    base = Path(recipe.base_model) if recipe.base_model else packaged_model_path()
    layout = read_model_layout(base)
    device = pick_device(device)
    _quiet_transformers()
    with _reproducible(seed, recipe.torch_threads):
        tokenizer = AutoTokenizer.from_pretrained(str(base))
        model = AutoModelForSequenceClassification.from_pretrained(
            str(base),
            num_labels=len(LABELS),
            id2label=dict(enumerate(LABELS)),
            label2id={label: i for i, label in enumerate(LABELS)},
            ignore_mismatched_sizes=True,
        ).to(device)
        reader = CrossEncoderClassifier(model, tokenizer, recipe, {}, device)
        encoded = reader._encode(
            [ex.question for ex in examples],
            [truncate(ex.context, recipe.truncation_chars) for ex in examples],
            padding=False,
        )
        _fit(model, tokenizer, encoded, label_indices(examples), seed, recipe, device)
        threads = torch.get_num_threads()
    model.eval()
    counts = {label: sum(ex.label == label for ex in examples) for label in LABELS}
    reader.metadata = {
        "reader": READER_KIND,
        "name": f"{READER_KIND}:{layout.path.name}",
        "labels": list(LABELS),
        "base_model": layout.fingerprint,
        "seed": seed,
        "recipe": recipe.to_dict(),
        "training_set_hash": training_set_hash(examples),
        "n_train": len(examples),
        "label_counts": counts,
        "device": device.split(":")[0],
        "torch_threads": threads,
        "torch_version": torch.__version__,
        "transformers_version": transformers.__version__,
    }
    reader.name = reader.metadata["name"]
    return reader


def _fit(
    model: Any,
    tokenizer: Any,
    encoded: Any,
    labels: np.ndarray,
    seed: int,
    recipe: ClassifierRecipe,
    device: str,
) -> None:
    import torch

    n = len(labels)
    steps_per_epoch = -(-n // recipe.batch_size)
    total = steps_per_epoch * recipe.epochs
    warmup = int(total * recipe.warmup_fraction)
    no_decay = ("bias", "LayerNorm.weight", "layer_norm.weight", "norm.weight")
    groups = [
        {
            "params": [p for k, p in model.named_parameters() if not k.endswith(no_decay)],
            "weight_decay": recipe.weight_decay,
        },
        {
            "params": [p for k, p in model.named_parameters() if k.endswith(no_decay)],
            "weight_decay": 0.0,
        },
    ]
    optimizer = torch.optim.AdamW(groups, lr=recipe.learning_rate)

    def schedule(step: int) -> float:
        # linear warm-up, then linear decay to 0
        if step < warmup:
            return (step + 1) / (warmup + 1)
        return max(0.0, (total - step) / max(1, total - warmup))

    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, schedule)
    rng = np.random.default_rng(seed)
    features = [{k: encoded[k][i] for k in encoded} for i in range(n)]
    model.train()
    for _ in range(recipe.epochs):
        order = rng.permutation(n)
        for start in range(0, n, recipe.batch_size):
            rows = order[start : start + recipe.batch_size]
            batch = tokenizer.pad([features[i] for i in rows], return_tensors="pt")
            batch = {k: v.to(device) for k, v in batch.items()}
            target = torch.as_tensor(labels[rows], device=device)
            logits = model(**batch).logits
            loss = torch.nn.functional.cross_entropy(logits.float(), target)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), recipe.max_grad_norm)
            optimizer.step()
            scheduler.step()


@contextmanager
def _reproducible(seed: int, threads: int) -> Iterator[None]:
    """Seeded torch RNG, deterministic algorithms and a pinned thread count for the block;
    the caller's RNG state and settings come back afterwards."""
    import torch

    previous_threads = torch.get_num_threads()
    previous_deterministic = torch.are_deterministic_algorithms_enabled()
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        torch.use_deterministic_algorithms(True)
        if threads:
            torch.set_num_threads(threads)
        try:
            yield
        finally:
            torch.use_deterministic_algorithms(previous_deterministic)
            torch.set_num_threads(previous_threads)


def _max_length(model: Any, wanted: int) -> int:
    limit = getattr(model.config, "max_position_embeddings", None)
    return min(wanted, int(limit)) if limit else wanted


def _label_columns(config: Any) -> list[int]:
    """Model output column for each of ``LABELS``: by the label names where the config
    names yes/no/maybe, else the model's own order."""
    names = {str(name).strip().lower(): int(i) for i, name in (config.id2label or {}).items()}
    if set(names) == set(LABELS):
        return [names[label] for label in LABELS]
    return list(range(len(LABELS)))


def _quiet_transformers() -> None:
    import transformers

    transformers.logging.disable_progress_bar()
    transformers.logging.set_verbosity_error()
