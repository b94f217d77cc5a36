"""One way to open a reader from a local folder, whatever kind wrote it.

A folder with ``reader.json`` names its kind (``cues``, ``probe``, ``cross-encoder``); a
Hugging Face folder without one is taken as a sequence classifier when its config says so,
else as a causal LM read with constrained decoding over the label tokens.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from kg_platform.answer.readers.base import Reader

METADATA_FILE = "reader.json"


def reader_kind(folder: str | os.PathLike[str]) -> str:
    """``cues``, ``probe``, ``cross-encoder`` or ``causal-lm``; a ValueError names the folder
    when it holds no reader."""
    folder = Path(folder)
    if not folder.is_dir():
        raise ValueError(f"{folder}: reader folder not found")
    metadata = folder / METADATA_FILE
    if metadata.is_file():
        try:
            kind = json.loads(metadata.read_text()).get("reader")
        except json.JSONDecodeError as exc:
            raise ValueError(f"{metadata}: not JSON: {exc}") from exc
        if kind in ("cues", "probe", "cross-encoder"):
            return kind
        raise ValueError(f"{metadata}: unknown reader kind {kind!r}")
    config = folder / "config.json"
    if not config.is_file():
        raise ValueError(f"{folder}: neither reader.json nor a Hugging Face config.json")
    try:
        architectures = json.loads(config.read_text()).get("architectures") or []
    except json.JSONDecodeError as exc:
        raise ValueError(f"{config}: not JSON: {exc}") from exc
    if any(a.endswith("ForSequenceClassification") for a in architectures):
        return "cross-encoder"
    if any(a.endswith("ForCausalLM") for a in architectures):
        return "causal-lm"
    raise ValueError(f"{config}: architectures {architectures} are not a reader")


def load_reader(folder: str | os.PathLike[str], device: str = "auto") -> Reader:
    """The reader saved in ``folder`` (see :func:`reader_kind`)."""
    kind = reader_kind(folder)
    if kind == "cues":
        from kg_platform.answer.readers.cues import load_cue_reader

        return load_cue_reader(folder)
    if kind == "probe":
        from kg_platform.answer.readers.probe import load_probe_reader

        return load_probe_reader(folder)
    if kind == "cross-encoder":
        from kg_platform.answer.readers.classifier import load_classifier

        return load_classifier(folder, device=device)
    from kg_platform.answer.readers.causal_lm import CausalLMReader

    return CausalLMReader(folder, device=device)


def open_reader(folder: str | None, kg_reader: str) -> Reader | None:
    """The reader of ``--reader DIR``, else of KG_READER (``kg_reader``), else None; a
    ValueError names the folder and where it came from."""
    source = "--reader"
    if folder is None:
        folder, source = kg_reader, "KG_READER"
        if not folder:
            return None
    if not folder.strip():
        raise ValueError(f"{source}: no folder given")
    try:
        return load_reader(folder)
    except ValueError as error:
        raise ValueError(f"{source}: {error}") from None
