from __future__ import annotations

from typing import TYPE_CHECKING

import dagster as dg

if TYPE_CHECKING:
    from kg_platform.embeddings.encoder import Encoder
    from kg_platform.embeddings.tokenising import TokenizerSpec


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

    def tokenizer_spec(self) -> TokenizerSpec:
        """The model's tokenizer alone (``tokenizers``: no torch, no weights loaded), for
        the CPU step that makes token files."""
        from kg_platform.embeddings.encoder import read_model_layout
        from kg_platform.embeddings.tokenising import spec_from_folder

        layout = read_model_layout(self.model_path)
        return spec_from_folder(layout.path, layout.max_length)
