"""Where the embedding layers live in the lake. ``embeddings/index/`` holds the PMID-sorted
vectors, their PMIDs and the manifest written last (``kg_platform.embeddings.index`` writes
them); spelled here, so that a question path that only asks whether an index is published
imports nothing of the encoder. The token files, the shards, a MeSH year's concept vectors
and the concept cache (``kg_platform.embeddings.{tokens,shards,concepts}`` write them) have
their folders here too."""

TOKENS = "embeddings/tokens"
SHARDS = "embeddings/shards"
CONCEPTS = "embeddings/concepts"
CONCEPT_CACHE = "embeddings/concept_cache"

INDEX = "embeddings/index"
INDEX_VECTORS = f"{INDEX}/vectors.f16.npy"
INDEX_PMIDS = f"{INDEX}/pmids.npy"
INDEX_MANIFEST = f"{INDEX}/manifest.json"
