"""Token files: the quotable records of one PubMed file, tokenised once on CPU workers.

One token file per (tokenizer, maximum length, PubMed file), at
``embeddings/tokens/<tokenizer key>/<file>.arrow`` (routed to the file's release), where the
tokenizer key is ``TokenizerSpec.key`` (``tok-<fingerprint>-L<max length>``): a model whose
tokenizer has the same fingerprint reads the same files. One row per quotable record, in PMID
order (the order of the file's embedding shard):

=========  ================  =============================================================
column     type              what
=========  ================  =============================================================
pmid       int64             ascending
length     uint16            token count with [CLS] and [SEP], at most the maximum length
ids        list<uint16>      the token ids (the vocabulary has fewer than 65,536 entries)
=========  ================  =============================================================

An Arrow IPC file (Feather v2) with zstd-compressed buffers: a list column is stored as its
offsets and its flat values, so reading one back is a decompression, not a decode (4x less CPU
than the same table as Parquet, and smaller: 9.2 MB against 9.7 MB for 25,000 abstracts).
The schema metadata ``kg_tokens`` (JSON) names the file, the
tokenizer fingerprint, the maximum length, the vocabulary size, the pad id, the row and
token counts and the sha256 of the flat ids, so a reader refuses a file made by another
tokenizer (naming its fingerprint) or one whose ids changed after it was written.

The ids are ``tokenizers``' (the Rust WordPiece every Hugging Face fast tokenizer is). Another
implementation may replace it only with the same ids on every reference text and a measured
gain: ``flash-tokenizer`` 1.2.0 (``BertTokenizerFlash``, one thread: 7x to 17x the texts/s,
15,313 against 2,140 on an H200's host, 11,424 against 663 here at load 10) was tried and is
not used. It differs on Unicode format and separator characters: ``tokenizers``'
BertNormalizer drops every control and format character (categories Cc and Cf) and splits
on U+2028; flash-tokenizer keeps U+00AD (soft hyphen) and U+FEFF inside the word, which then
becomes one [UNK] (the one reference abstract of 5,583 it got wrong: "shrink\xad ing" is
``shrink ing`` for ``tokenizers``, ``[UNK] ing`` for flash), and joins the words around
U+2028 ("ab\u2028cd": ``ab cd`` against ``abc ##d``). Stripping Cc/Cf first makes all 5,583
reference texts equal, but U+2028 still differs, so PubMed at large could not be trusted to it.

This module imports numpy and pyarrow only (and ``tokenizers`` inside the functions that
tokenise), so ``benchmarks/embed.py`` reads token files on a bare GPU machine.
"""

from __future__ import annotations

import hashlib
import io
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.ipc as ipc

from kg_platform.checks import CheckOutcome
from kg_platform.embeddings.tokenising import TokenizerSpec
from kg_platform.storage.embeddings import TOKENS

FORMAT = 1
METADATA_KEY = b"kg_tokens"
SAMPLE_ROWS = 64  # rows the sample check re-tokenises
CHUNK = 2048  # texts per encode_batch call while tokenising a file


class TokenFileError(ValueError):
    """A token file that cannot be used, named with what is wrong."""


def tokens_key(spec_key: str, file: str) -> str:
    return f"{TOKENS}/{spec_key}/{file}.arrow"


@dataclass(frozen=True)
class TokenFile:
    """One file's token ids as flat arrays: row ``i`` is ``ids[offsets[i]:offsets[i + 1]]``."""

    file: str
    pmids: np.ndarray  # int64, ascending
    lengths: np.ndarray  # uint16
    ids: np.ndarray  # uint16, flat
    offsets: np.ndarray  # int64, len(pmids) + 1
    meta: dict[str, Any]

    def __len__(self) -> int:
        return len(self.pmids)

    @property
    def fingerprint(self) -> str:
        return str(self.meta.get("fingerprint"))

    @property
    def max_length(self) -> int:
        return int(self.meta.get("max_length", 0))

    def row(self, i: int) -> list[int]:
        return self.ids[self.offsets[i] : self.offsets[i + 1]].tolist()


def ids_sha256(ids: np.ndarray) -> str:
    return hashlib.sha256(memoryview(np.ascontiguousarray(ids, dtype="<u2"))).hexdigest()


def tokenise(spec: TokenizerSpec, texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    """Flat uint16 ids and uint16 lengths of ``texts`` with the spec's tokenizer, in this
    process (its own Rust threads unless TOKENIZERS_PARALLELISM=false)."""
    if spec.vocab_size > 65536:
        raise TokenFileError(f"{spec.fingerprint}: {spec.vocab_size} ids do not fit uint16")
    tokenizer = spec.load()
    flats: list[np.ndarray] = []
    lengths: list[np.ndarray] = []
    for start in range(0, len(texts), CHUNK):
        encodings = tokenizer.encode_batch(list(texts[start : start + CHUNK]))
        lengths.append(np.fromiter((len(e.ids) for e in encodings), np.uint16, len(encodings)))
        flats.append(
            np.fromiter(
                (i for e in encodings for i in e.ids), np.uint16, int(lengths[-1].sum(dtype=int))
            )
        )
    if not flats:
        return np.zeros(0, np.uint16), np.zeros(0, np.uint16)
    return np.concatenate(flats), np.concatenate(lengths)


def make_token_file(
    spec: TokenizerSpec, file: str, pmids: np.ndarray, texts: Sequence[str]
) -> TokenFile:
    """Tokenise one file's quotable records (``pmids`` ascending, ``texts`` in that order)."""
    if len(pmids) != len(texts):
        raise TokenFileError(f"{file}: {len(pmids)} PMIDs for {len(texts)} texts")
    ids, lengths = tokenise(spec, texts)
    offsets = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    meta = {
        "format": FORMAT,
        "file": file,
        "fingerprint": spec.fingerprint,
        "max_length": spec.max_length,
        "vocab_size": spec.vocab_size,
        "pad_id": spec.pad_id,
        "count": len(pmids),
        "tokens": int(offsets[-1]),
        "ids_sha256": ids_sha256(ids),
    }
    return TokenFile(file, np.asarray(pmids, dtype=np.int64), lengths, ids, offsets, meta)


def to_bytes(tokens: TokenFile) -> bytes:
    """The token file's bytes (Arrow IPC, zstd)."""
    ids = pa.ListArray.from_arrays(
        pa.array(tokens.offsets.astype(np.int32), pa.int32()), pa.array(tokens.ids, pa.uint16())
    )
    table = pa.table(
        {
            "pmid": pa.array(tokens.pmids, pa.int64()),
            "length": pa.array(tokens.lengths, pa.uint16()),
            "ids": ids,
        }
    ).replace_schema_metadata({METADATA_KEY: json.dumps(tokens.meta, sort_keys=True)})
    sink = io.BytesIO()
    with ipc.new_file(
        sink, table.schema, options=ipc.IpcWriteOptions(compression="zstd")
    ) as writer:
        writer.write_table(table)
    return sink.getvalue()


def from_table(table: pa.Table, what: str) -> TokenFile:
    """A token file from its Arrow table, its metadata and its ids' checksum checked."""
    raw = (table.schema.metadata or {}).get(METADATA_KEY)
    if raw is None:
        raise TokenFileError(f"{what}: no kg_tokens metadata; not a token file")
    meta = json.loads(raw)
    if meta.get("format") != FORMAT:
        raise TokenFileError(f"{what}: token file format {meta.get('format')}, expected {FORMAT}")
    chunked = table.column("ids")
    # one record batch (as written): its array as it is, no concatenating copy
    column = chunked.chunk(0) if chunked.num_chunks == 1 else chunked.combine_chunks()
    ids = column.flatten().to_numpy(zero_copy_only=False)
    offsets = column.offsets.to_numpy().astype(np.int64)
    offsets -= offsets[0]
    pmids = table.column("pmid").to_numpy().astype(np.int64, copy=False)
    lengths = table.column("length").to_numpy()
    if ids.dtype != np.uint16 or lengths.dtype != np.uint16:
        raise TokenFileError(f"{what}: ids {ids.dtype} and lengths {lengths.dtype}, not uint16")
    if meta.get("count") != len(pmids) or meta.get("tokens") != len(ids):
        raise TokenFileError(
            f"{what}: {len(pmids)} rows and {len(ids)} ids, its metadata says "
            f"{meta.get('count')} and {meta.get('tokens')}"
        )
    if meta.get("ids_sha256") != ids_sha256(ids):
        raise TokenFileError(f"{what}: ids sha256 differs from the one sealed in its metadata")
    return TokenFile(str(meta.get("file")), pmids, lengths, ids, offsets, meta)


def from_bytes(data: bytes, what: str) -> TokenFile:
    """A token file from its bytes, checksum checked; ``what`` names it in errors."""
    try:
        table = ipc.open_file(pa.BufferReader(data)).read_all()
    except Exception as exc:  # pyarrow raises several kinds; name the file either way
        raise TokenFileError(f"{what}: unreadable token file: {exc}") from exc
    return from_table(table, what)


def read_token_file(path: str) -> TokenFile:
    """A local token file by path, checksum checked."""
    with open(path, "rb") as f:
        return from_bytes(f.read(), path)


def read_tokens(lake: Any, spec: TokenizerSpec, file: str) -> TokenFile:
    """``file``'s token file for ``spec`` from the lake, refused (naming both fingerprints)
    when another tokenizer or maximum length made it."""
    key = tokens_key(spec.key, file)
    if not lake.exists(key):
        raise TokenFileError(
            f"{lake.path(key)}: no token file for tokenizer {spec.key}; "
            f"materialise embedding_tokens[{file}] first"
        )
    tokens = from_bytes(lake.read_bytes(key), lake.path(key))
    require_spec(tokens, spec, lake.path(key))
    return tokens


def require_spec(tokens: TokenFile, spec: TokenizerSpec, what: str) -> None:
    made = (tokens.fingerprint, tokens.max_length)
    if made != (spec.fingerprint, spec.max_length):
        raise TokenFileError(
            f"{what}: made by tokenizer {tokens.fingerprint} (max length {tokens.max_length}); "
            f"the model's tokenizer is {spec.fingerprint} (max length {spec.max_length}): "
            f"materialise embedding_tokens[{tokens.file}] for it"
        )


def token_checks(
    tokens: TokenFile | None,
    error: str | None,
    spec: TokenizerSpec,
    expected_pmids: np.ndarray,
    texts: Sequence[str],
    sample: int = SAMPLE_ROWS,
) -> list[CheckOutcome]:
    """The four outcomes of contracts.TOKEN_CHECKS for a token file read back from the
    staged lake (``tokens``), or for the error reading it raised (``error``): every check
    fails, naming it."""
    names = (
        "one_row_per_quotable_record",
        "ids_inside_vocabulary",
        "lengths_at_most_max",
        "sample_matches_tokenizer",
    )
    if tokens is None:
        return [CheckOutcome(name, False, error or "no token file") for name in names]
    outcomes = []
    same = np.array_equal(tokens.pmids, expected_pmids)
    outcomes.append(
        CheckOutcome(
            names[0],
            same,
            f"{len(tokens)} rows for {len(expected_pmids)} quotable records"
            + ("" if same else ": the PMIDs differ from the corpus's"),
            {"rows": len(tokens), "quotable": len(expected_pmids)},
        )
    )
    top = int(tokens.ids.max()) if len(tokens.ids) else -1
    outcomes.append(
        CheckOutcome(
            names[1],
            top < spec.vocab_size,
            f"largest id {top}, vocabulary {spec.vocab_size}",
            {"max_id": top, "vocab_size": spec.vocab_size},
        )
    )
    longest = int(tokens.lengths.max()) if len(tokens) else 0
    consistent = np.array_equal(np.diff(tokens.offsets), tokens.lengths.astype(np.int64))
    outcomes.append(
        CheckOutcome(
            names[2],
            longest <= spec.max_length and consistent,
            f"longest {longest} tokens, maximum {spec.max_length}"
            + ("" if consistent else "; the length column disagrees with the id lists"),
            {"longest": longest, "max_length": spec.max_length},
        )
    )
    outcomes.append(_sample_check(names[3], tokens, spec, texts, sample, same))
    return outcomes


def _sample_check(
    name: str, tokens: TokenFile, spec: TokenizerSpec, texts: Sequence[str], n: int, rows_ok: bool
) -> CheckOutcome:
    if not rows_ok:
        return CheckOutcome(name, False, "not compared: the rows are not the corpus's records")
    # the same rows every time for one file: a failure can be reproduced
    seed = int.from_bytes(hashlib.sha256(tokens.file.encode()).digest()[:4], "little")
    rows = np.sort(np.random.default_rng(seed).permutation(len(tokens))[:n])
    encodings = spec.load().encode_batch([texts[i] for i in rows]) if len(rows) else []
    differ = [int(r) for r, e in zip(rows, encodings, strict=True) if e.ids != tokens.row(r)]
    details = f"{len(rows) - len(differ)} of {len(rows)} sampled rows equal the tokenizer's ids"
    if differ:
        details += f"; rows differing: {differ[:10]} (PMIDs {tokens.pmids[differ[:10]].tolist()})"
    return CheckOutcome(name, not differ, details, {"sampled": len(rows), "differing": len(differ)})
