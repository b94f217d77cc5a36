"""Where the embedding index lives in the lake: ``embeddings/index/`` holds the PMID-sorted
vectors, their PMIDs and the manifest written last (``kg_platform.embeddings.index`` writes
them). Spelled here, beside the other layouts, so that a question path that only asks
whether an index is published imports nothing of the encoder."""

INDEX = "embeddings/index"
INDEX_VECTORS = f"{INDEX}/vectors.f16.npy"
INDEX_PMIDS = f"{INDEX}/pmids.npy"
INDEX_MANIFEST = f"{INDEX}/manifest.json"
