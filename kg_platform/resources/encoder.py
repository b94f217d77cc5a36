from __future__ import annotations

from typing import TYPE_CHECKING

import dagster as dg

if TYPE_CHECKING:
    from kg_platform.embeddings.encoder import Encoder


class EncoderResource(dg.ConfigurableResource):
    """The sentence encoder: a local sentence-transformers or Hugging Face model folder
    (empty = the packaged all-MiniLM-L6-v2), on `auto` (CUDA if present), `cpu` or `cuda`."""

    model_path: str = ""
    device: str = "auto"
    batch_size: int = 256

    def get(self) -> Encoder:
        # numpy (and torch, when it encodes) load with the step that embeds
        from kg_platform.embeddings.encoder import Encoder

        return Encoder(self.model_path, device=self.device, batch_size=self.batch_size)
