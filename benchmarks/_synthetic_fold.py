"""Per-file PubMed tables for the fold benchmark, written straight as Parquet (no XML).

The tables have exactly the parser's Arrow schemas (``kg_platform.schemas.ARROW_SCHEMAS``)
and are written as the parser writes them (``pq.write_table``, zstd), under the keys the fold
reads (``tables/<table>/<file>.parquet``). Files hold 30,000 records each, as NLM's do;
baseline files hold distinct ascending PMIDs, update files (numbered after the baseline, as at
NLM) half new PMIDs and half revisions of earlier ones (a tenth of those as Version 2), plus
DeleteCitation lists of earlier PMIDs. Per record, vectorised with numpy:

- title ~100 B and abstract ~1.65 KB (90% of records have one: ~1.5 KB per record), cut
  from a pool of Zipf-distributed words, so zstd compresses it about as it does English;
- ~11.5 MeSH rows (1 + Poisson(8) headings over 30,000 descriptors with Zipf popularity,
  0-3 qualifiers each, one row per heading/qualifier pair);
- ~20 distinct cited PMIDs (negative binomial, heavy-tailed), 90% earlier records skewed
  towards old ones, 10% uniform over the PMID range (about half of those dangling);
- ~1.8 chemicals, ~1.4 publication types (0.05% Retracted Publication), ~0.15 corrections.

The same arguments give the same tables (fixed seed).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from kg_platform.pubmed.fold import table_key
from kg_platform.schemas import ARROW_SCHEMAS, MeshDescriptors, MeshTree, arrow_schema

FILE_RECORDS = 30_000
UPDATE_FRACTION = 0.08  # of all records, in update files: half new PMIDs, half revisions
DELETE_FRACTION = 0.0005  # of all records: PMIDs named by a DeleteCitation in an update file
N_DESCRIPTORS = 30_000
N_QUALIFIERS = 76
N_JOURNALS = 30_000
N_CHEMICALS = 50_000
POOL_BYTES = 96 << 20  # word pool the titles and abstracts are cut from
RELEASE = "pubmed26"

PUBTYPES = (  # (ui, name, share among the extra types after the first 'Journal Article')
    ("D016428", "Journal Article", 0.0),
    ("D016454", "Review", 0.35),
    ("D013485", "Research Support, Non-U.S. Gov't", 0.3),
    ("D016449", "Randomized Controlled Trial", 0.1),
    ("D004740", "English Abstract", 0.1),
    ("D016422", "Letter", 0.08),
    ("D016421", "Editorial", 0.0695),
    ("D016441", "Retracted Publication", 0.0005),
)
REF_TYPES = (  # (ref_type, share)
    ("CommentOn", 0.35),
    ("CommentIn", 0.3),
    ("ErratumIn", 0.15),
    ("ErratumFor", 0.1),
    ("UpdateOf", 0.05),
    ("RepublishedFrom", 0.03),
    ("RetractionIn", 0.005),
    ("RetractionOf", 0.005),
    ("ExpressionOfConcernIn", 0.005),
    ("ExpressionOfConcernFor", 0.005),
)
LANGUAGES = (("eng", 0.88), ("chi", 0.03), ("ger", 0.02), ("fre", 0.02), ("jpn", 0.02))


@dataclass(frozen=True)
class SyntheticRelease:
    files: list[str]  # in processing order: baseline, then updates
    records: int  # article rows over all files
    distinct_pmids: int
    revisions: int  # update records re-issuing an earlier PMID
    deletions: int  # DeleteCitation PMIDs over all files
    bytes_written: int


def _strings(values: list[str]) -> pa.Array:
    return pa.array(values, pa.string())


def _pick(dictionary: pa.Array, indices: np.ndarray) -> pa.Array:
    """Plain string array of ``dictionary[indices]`` (the parser writes plain strings)."""
    return pc.take(dictionary, pa.array(indices.astype(np.int32, copy=False)))


def _shares(rng: np.random.Generator, n: int, shares: tuple[float, ...]) -> np.ndarray:
    p = np.asarray(shares, dtype=np.float64)
    return rng.choice(p.size, n, p=p / p.sum())


class _Vocabulary:
    """The one-off dictionaries every file draws from (a few tens of thousands of strings)."""

    def __init__(self, rng: np.random.Generator) -> None:
        letters = np.frombuffer(b"abcdefghijklmnopqrstuvwxyz", dtype=np.uint8)
        lengths = np.clip(rng.poisson(6, 20_000), 2, 14)
        words = [letters[rng.integers(0, 26, n)].tobytes() for n in lengths]
        # Zipf-like word frequency, as in English text
        ids = (rng.zipf(1.15, POOL_BYTES // 6) - 1) % len(words)
        pool = b" ".join(np.array(words, dtype=object)[ids].tolist())
        self.pool = pa.py_buffer(pool[:POOL_BYTES])
        self.pool_bytes = min(len(pool), POOL_BYTES)
        self.descriptors = _strings([f"D{k:06d}" for k in range(1, N_DESCRIPTORS + 1)])
        self.qualifiers = _strings([f"Q{k:06d}" for k in range(1, N_QUALIFIERS + 1)])
        self.journals = self._phrases(rng, N_JOURNALS, 30)
        self.chemical_names = self._phrases(rng, N_CHEMICALS, 20)
        self.chemical_uis = _strings(
            [f"D{k:06d}" if k % 3 == 0 else f"C{k:09d}" for k in range(1, N_CHEMICALS + 1)]
        )
        self.registry = _strings(
            [
                "0" if k % 4 == 0 else f"EC 3.4.21.{k}" if k % 4 == 1 else f"{k}-{k % 97:02d}-7"
                for k in range(N_CHEMICALS)
            ]
        )
        self.pubtype_uis = _strings([ui for ui, _, _ in PUBTYPES])
        self.pubtype_names = _strings([name for _, name, _ in PUBTYPES])
        self.ref_types = _strings([t for t, _ in REF_TYPES])
        self.languages = _strings([code for code, _ in LANGUAGES])

    def _phrases(self, rng: np.random.Generator, n: int, mean: int) -> pa.Array:
        lengths = np.clip(rng.poisson(mean, n), 4, 4 * mean)
        return self.text(rng, lengths, np.ones(n, dtype=bool))

    def text(self, rng: np.random.Generator, lengths: np.ndarray, valid: np.ndarray) -> pa.Array:
        """One string per length, contiguous slices of the pool; null where not ``valid``."""
        lengths = np.where(valid, lengths, 0).astype(np.int64)
        total = int(lengths.sum())
        if total > self.pool_bytes:
            raise ValueError(f"text of {total} bytes asked, pool holds {self.pool_bytes}")
        start = int(rng.integers(0, self.pool_bytes - total + 1))
        offsets = np.empty(lengths.size + 1, dtype=np.int32)
        offsets[0] = start
        np.cumsum(lengths, out=offsets[1:])
        offsets[1:] += start
        nulls = int(lengths.size - np.count_nonzero(valid))
        bitmap = pa.py_buffer(np.packbits(valid, bitorder="little")) if nulls else None
        return pa.StringArray.from_buffers(
            lengths.size, pa.py_buffer(offsets), self.pool, bitmap, nulls
        )


def _table(name: str, columns: dict[str, pa.Array | np.ndarray]) -> pa.Table:
    schema = ARROW_SCHEMAS[name]
    return pa.table({f.name: pa.array(columns[f.name], f.type) for f in schema}, schema=schema)


def _file_tables(
    rng: np.random.Generator,
    vocab: _Vocabulary,
    name: str,
    index: np.ndarray,  # each record's index into all_pmids
    version: np.ndarray,
    deleted: np.ndarray,
    all_pmids: np.ndarray,
) -> dict[str, pa.Table]:
    n = index.size
    pmid = all_pmids[index]
    max_pmid = int(all_pmids[-1])

    # -- articles
    has_abstract = rng.random(n) < 0.9
    abstract_len = np.clip(rng.normal(1650, 500, n), 200, 4000).astype(np.int64)
    title_len = np.clip(rng.normal(100, 35, n), 20, 300).astype(np.int64)
    year = (1950 + 77 * index // all_pmids.size).astype(np.int32)

    # -- pubtypes: 'Journal Article' first, then 0+ others
    n_pt = 1 + rng.poisson(0.4, n)
    pt_rows = int(n_pt.sum())
    first = np.zeros(pt_rows, dtype=bool)
    first[np.concatenate([[0], np.cumsum(n_pt)[:-1]])] = True
    extra = 1 + _shares(rng, pt_rows, tuple(s for _, _, s in PUBTYPES[1:]))
    pt_kind = np.where(first, 0, extra)

    articles = _table(
        "articles",
        {
            "pmid": pmid,
            "version": version,
            "file": _pick(_strings([name]), np.zeros(n, dtype=np.int32)),
            "title": vocab.text(rng, title_len, np.ones(n, dtype=bool)),
            "abstract": vocab.text(rng, abstract_len, has_abstract),
            "has_abstract": has_abstract,
            "year": year,
            "journal": _pick(vocab.journals, (rng.zipf(1.2, n) - 1) % N_JOURNALS),
            "language": _pick(vocab.languages, _shares(rng, n, tuple(s for _, s in LANGUAGES))),
            "n_pubtypes": n_pt.astype(np.int32),
        },
    )
    pubtypes = _table(
        "pubtypes",
        {
            "pmid": np.repeat(pmid, n_pt),
            "version": np.repeat(version, n_pt),
            "pubtype_ui": _pick(vocab.pubtype_uis, pt_kind),
            "name": _pick(vocab.pubtype_names, pt_kind),
        },
    )

    # -- MeSH: headings, then one row per heading/qualifier pair (one row without)
    headings = 1 + rng.poisson(8, n)
    h_record = np.repeat(np.arange(n), headings)
    h_desc = (rng.zipf(1.3, h_record.size) - 1) % N_DESCRIPTORS
    h_major = rng.random(h_record.size) < 0.3
    n_qual = rng.choice(4, h_record.size, p=[0.55, 0.25, 0.12, 0.08])
    per_heading = np.maximum(n_qual, 1)
    row_heading = np.repeat(np.arange(h_record.size), per_heading)
    has_qual = np.repeat(n_qual > 0, per_heading)
    qual_major = rng.random(row_heading.size) < 0.15
    mesh_edges = _table(
        "mesh_edges",
        {
            "pmid": pmid[h_record[row_heading]],
            "version": version[h_record[row_heading]],
            "descriptor_ui": _pick(vocab.descriptors, h_desc[row_heading]),
            "descriptor_major": h_major[row_heading],
            "qualifier_ui": pc.if_else(
                pa.array(has_qual),
                _pick(vocab.qualifiers, rng.integers(0, N_QUALIFIERS, row_heading.size)),
                pa.scalar(None, pa.string()),
            ),
            "qualifier_major": pa.array(qual_major, mask=~has_qual),
        },
    )

    # -- citations: distinct cited PMIDs per record, mostly earlier records
    n_cit = rng.negative_binomial(2, 2 / 22, n)
    c_record = np.repeat(np.arange(n, dtype=np.int64), n_cit)
    earlier = (index[c_record] * rng.random(c_record.size) ** 2.0).astype(np.int64)
    cited = all_pmids[earlier]
    anywhere = rng.random(c_record.size) < 0.1
    cited[anywhere] = rng.integers(1, max_pmid + 1, int(anywhere.sum()))
    pairs = np.unique((c_record << 32) | cited)  # record order kept, duplicates dropped
    c_record, cited = pairs >> 32, pairs & 0xFFFFFFFF
    citations = _table(
        "citations",
        {"citing_pmid": pmid[c_record], "version": version[c_record], "cited_pmid": cited},
    )

    # -- chemicals: 55% of records have 1 + Poisson(2.3)
    n_chem = np.where(rng.random(n) < 0.55, 1 + rng.poisson(2.3, n), 0)
    k_record = np.repeat(np.arange(n), n_chem)
    chem = (rng.zipf(1.2, k_record.size) - 1) % N_CHEMICALS
    chemicals = _table(
        "chemicals",
        {
            "pmid": pmid[k_record],
            "version": version[k_record],
            "registry_number": _pick(vocab.registry, chem),
            "substance_ui": _pick(vocab.chemical_uis, chem),
            "substance_name": _pick(vocab.chemical_names, chem),
        },
    )

    # -- corrections
    n_corr = rng.poisson(0.15, n)
    r_record = np.repeat(np.arange(n), n_corr)
    ref_pmid = all_pmids[(index[r_record] * rng.random(r_record.size)).astype(np.int64)]
    corrections = _table(
        "corrections",
        {
            "pmid": pmid[r_record],
            "version": version[r_record],
            "ref_type": _pick(
                vocab.ref_types, _shares(rng, r_record.size, tuple(s for _, s in REF_TYPES))
            ),
            "ref_pmid": pa.array(ref_pmid, mask=rng.random(r_record.size) < 0.05),
        },
    )
    deletions = _table("deletions", {"pmid": np.unique(deleted).astype(np.int64)})
    return {
        "articles": articles,
        "mesh_edges": mesh_edges,
        "citations": citations,
        "corrections": corrections,
        "chemicals": chemicals,
        "pubtypes": pubtypes,
        "deletions": deletions,
    }


def _write_mesh(root: str, vocab: _Vocabulary) -> int:
    """mesh/descriptors and mesh/tree, as the graph build reads them."""
    os.makedirs(os.path.join(root, "mesh"), exist_ok=True)
    n = N_DESCRIPTORS
    letters = np.array(list("ABCDEFGHIJKLMNVZ"))
    categories = pa.array([[str(letters[k % 16])] for k in range(n)], pa.list_(pa.string()))
    descriptors = pa.table(
        {
            "ui": vocab.descriptors,
            "name": _pick(vocab.chemical_names, np.arange(n)),
            "categories": categories,
            "min_depth": pa.array(np.full(n, 2, dtype=np.int32)),
            "n_trees": pa.array(np.ones(n, dtype=np.int32)),
        },
        schema=arrow_schema(MeshDescriptors),
    )
    tree = pa.table(
        {
            "ui": vocab.descriptors,
            "tree_number": _strings([f"{letters[k % 16]}{k % 97:02d}.{k:03d}" for k in range(n)]),
        },
        schema=arrow_schema(MeshTree),
    )
    size = 0
    for table, name in ((descriptors, "descriptors"), (tree, "tree")):
        path = os.path.join(root, "mesh", f"{name}.parquet")
        pq.write_table(table, path, compression="zstd")
        size += os.path.getsize(path)
    return size


def write_release(root: str, records: int, seed: int = 26) -> SyntheticRelease:
    """Write ``records`` article rows as per-file tables under ``root``, plus mesh/."""
    rng = np.random.default_rng(seed)
    vocab = _Vocabulary(rng)
    n_update = int(records * UPDATE_FRACTION)
    n_baseline = records - n_update
    n_new = n_update // 2
    distinct = n_baseline + n_new
    all_pmids = np.cumsum(rng.integers(1, 4, distinct, dtype=np.int64))  # gaps, like PubMed

    # (index, version) of every record in processing order, cut into files of 30,000
    base_files = -(-n_baseline // FILE_RECORDS)
    update_files = -(-n_update // FILE_RECORDS) if n_update else 0
    plan: list[tuple[str, np.ndarray, np.ndarray, np.ndarray]] = []
    for k in range(base_files):
        index = np.arange(k * FILE_RECORDS, min((k + 1) * FILE_RECORDS, n_baseline))
        plan.append((f"{RELEASE}n{k + 1:04d}", index, np.ones(index.size, np.int32), index[:0]))
    published = n_baseline
    revisions = 0
    per_update_deletions = int(records * DELETE_FRACTION) // max(update_files, 1)
    for k in range(update_files):
        size = min(FILE_RECORDS, n_update - k * FILE_RECORDS)
        fresh = np.arange(published, min(published + size // 2, distinct))
        # a PMID once per file, as in NLM's files (the schema's unique pmid, version)
        revised = np.unique(rng.integers(0, published, size - fresh.size))
        published += fresh.size
        revisions += revised.size
        index = np.concatenate([revised, fresh])
        version = np.ones(index.size, dtype=np.int32)
        version[: revised.size][rng.random(revised.size) < 0.1] = 2  # a tenth as Version 2
        deleted = all_pmids[rng.integers(0, published, per_update_deletions)]
        plan.append((f"{RELEASE}n{base_files + k + 1:04d}", index, version, deleted))

    written = _write_mesh(root, vocab)
    deletions = 0
    for name, index, version, deleted in plan:
        tables = _file_tables(rng, vocab, name, index, version, deleted, all_pmids)
        for table, frame in tables.items():
            path = os.path.join(root, table_key(table, name))
            os.makedirs(os.path.dirname(path), exist_ok=True)
            pq.write_table(frame, path, compression="zstd")
            written += os.path.getsize(path)
        deletions += tables["deletions"].num_rows
    return SyntheticRelease(
        files=[name for name, *_ in plan],
        records=records,
        distinct_pmids=int(distinct),
        revisions=int(revisions),
        deletions=int(deletions),
        bytes_written=int(written),
    )
