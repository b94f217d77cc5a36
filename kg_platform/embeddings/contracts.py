"""What the Dagster definitions declare about the dense layer's checks (kg_platform.embeddings
.shards, .index and .concepts run them; those load numpy and Polars, imported by the steps)."""

from kg_platform.checks import Checks

# a token file that fails any of these is not published (embedding_tokens)
TOKEN_CHECKS: Checks = {
    "one_row_per_quotable_record": (
        "the token file holds exactly the file's quotable PMIDs, in PMID order",
        True,
    ),
    "ids_inside_vocabulary": ("every token id is below the tokenizer's vocabulary size", True),
    "lengths_at_most_max": (
        "every length is at most the maximum length and equals its row's id count",
        True,
    ),
    "sample_matches_tokenizer": (
        "a seeded sample of rows re-tokenised from the corpus gives the same ids",
        True,
    ),
}
# a shard that does not verify is not published: the file's last verified shard stays
SHARD_CHECKS: Checks = {
    "one_vector_per_quotable_record": (
        "each shard holds exactly the file's quotable PMIDs, sealed and verified",
        True,
    ),
}
# reported, not blocking: the index is rebuilt from its shards, which are checked
INDEX_CHECKS: Checks = {
    "vector_count_equals_quotable": (
        "vectors == quotable records, any gap explained by files without a verified shard",
        False,
    ),
    "sample_rows_match_shards": (
        "a random sample of index rows equals its shard rows bit for bit",
        False,
    ),
    "norms_about_one": ("sampled vectors have norm 1 up to fp16 rounding", False),
    "files_match_manifest": (
        "each array file has the size and data sha256 its manifest records",
        False,
    ),
}
CONCEPT_CHECKS: Checks = {
    "norms_about_one": ("every concept surface vector has norm 1 up to fp16 rounding", False),
}
