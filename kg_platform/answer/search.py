"""Exact dense top-k over the embedding index, with the hits' titles: the one search behind
`kg search` and `kg serve`'s ``GET /search``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kg_platform.answer.titles import TitleLookup
from kg_platform.embeddings.index import INDEX
from kg_platform.storage.lake import Lake

if TYPE_CHECKING:
    from kg_platform.answer.api import KnowledgeGraph
    from kg_platform.embeddings.encoder import Encoder
    from kg_platform.retrieval.dense import DenseHits, DenseIndex

MAX_SEARCH_CHARS = 2000  # `kg search`'s question limit (`kg serve` keeps `kg ask`'s)


def indexed_release(root: Lake, release: str | None) -> str:
    """The release to search: ``release``, or the newest with an index (the MeSH year plays
    no part in dense search)."""
    built = [k.rsplit("/", 1)[1] for k in root.list(INDEX)]
    release = release or (max(built) if built else None)
    if release is None:
        raise FileNotFoundError(
            f"{root.path(INDEX)}: no embedding index; materialise `embedding_index` first"
        )
    return release


@dataclass(frozen=True)
class DenseSearch:
    """An opened index, the encoder its vectors came from, and the corpus's titles."""

    index: DenseIndex
    encoder: Encoder
    titles: TitleLookup

    @classmethod
    def open(cls, lake: Lake, model: str = "", device: str = "auto") -> DenseSearch:
        from kg_platform.embeddings.encoder import Encoder
        from kg_platform.retrieval.dense import DenseIndex

        index = DenseIndex.open(lake, device=device)
        encoder = Encoder(model, device=device)
        if index.fingerprint and index.fingerprint != encoder.fingerprint:
            raise ValueError(f"index built by {index.fingerprint}, model is {encoder.fingerprint}")
        return cls(index, encoder, TitleLookup(lake))

    @classmethod
    def of_graph(cls, kg: KnowledgeGraph) -> DenseSearch:
        """The search over an opened graph's lake: its dense ranker's index and encoder when
        it has one, else the lake's index and the packaged encoder."""
        if kg.semantic is not None:
            return cls(kg.semantic.index, kg.semantic.encoder, kg.title_lookup)
        return cls.open(kg.lake)

    def hits(self, question: str, k: int) -> DenseHits:
        return self.index.search(self.encoder.encode([question]), k=k)[0]

    def titles_of(self, hits: DenseHits) -> dict[int, str | None]:
        """Titles of the hits from the corpus, when it is there (search works without it)."""
        return self.titles.titles([int(p) for p in hits.pmids.tolist()])

    def document(
        self, question: str, k: int, hits: DenseHits, partition: dict[str, Any]
    ) -> dict[str, Any]:
        """The JSON object `kg search --json` prints and ``GET /search`` answers."""
        titles = self.titles_of(hits)
        return {
            "question": question,
            "partition": partition,
            "k": k,
            "index_vectors": len(self.index),
            "hits": [{**h, "title": titles.get(int(h["pmid"]))} for h in hits.as_list()],
        }
