"""Where the downloaded PubMed files live in the lake:
``raw/pubmed/<release>/<sub_dir>/<name>.xml.gz``, and a new version of one waiting until it
parses under ``raw/pubmed/<release>/pending/`` (``kg_platform.pubmed.source`` names each
file's key)."""

RAW_PUBMED = "raw/pubmed"
