"""Where a MeSH year's grounding index lives in the lake: the surfaces table and its manifest
(``kg_platform.grounding.index`` writes them) and the load-ready index file
(``kg_platform.grounding.surface_index``)."""

SURFACES_KEY = "grounding/surfaces.parquet"
MANIFEST_KEY = "grounding/manifest.json"
INDEX_KEY = "grounding/index.kgi"
