"""The posterior cache: one row per (question, setting, candidate rank) with the reader's
P(yes, no, maybe) for that candidate read alone, and the checks that guard it.

Each check recomputes what it tests from the table and the question file, never from the
builder's own bookkeeping, and returns a :class:`CheckOutcome` (name, passed, details).
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import duckdb
import numpy as np
import pandera.polars as pa
import polars as pl
import pyarrow

from kg_platform.answer.readers.base import (
    LABELS,
    ROW_SUM_TOLERANCE,
    LabelledQuestion,
    Reader,
    check_posteriors,
)
from kg_platform.checks import CheckOutcome
from kg_platform.evaluation.common.posteriors import SETTINGS
from kg_platform.evaluation.pubmedqa.candidates import (
    Candidate,
    candidate_texts,
    source_pmid,
)
from kg_platform.schemas import arrow_schema

PROBABILITIES = tuple(f"p_{label}" for label in LABELS)


class PosteriorCache(pa.DataFrameModel):
    """One row per (question, setting, candidate rank): the reader's posterior for that
    candidate read alone."""

    question_id: pl.Utf8 = pa.Field(description="PubMedQA question id (its source PMID)")
    pmid: pl.Int64 = pa.Field(gt=0, description="PMID of the candidate read")
    rank: pl.Int32 = pa.Field(ge=1, description="1-based rank of the candidate in its setting")
    is_source: pl.Boolean = pa.Field(description="The candidate is the question's own abstract")
    setting: pl.Utf8 = pa.Field(isin=list(SETTINGS), description="oracle, retrieved or leak_free")
    truncation: pl.Int32 = pa.Field(ge=0, description="Characters of candidate text read (0 = all)")
    p_yes: pl.Float32 = pa.Field(ge=0, le=1, description="P(yes | question, candidate)")
    p_no: pl.Float32 = pa.Field(ge=0, le=1, description="P(no | question, candidate)")
    p_maybe: pl.Float32 = pa.Field(ge=0, le=1, description="P(maybe | question, candidate)")
    reader: pl.Utf8 = pa.Field(description="Name of the reader")
    config_hash: pl.Utf8 = pa.Field(description="Hash of the candidate/reader configuration")

    class Config:
        strict = True
        unique = ["question_id", "setting", "rank"]


POSTERIOR_CACHE_SCHEMA = arrow_schema(PosteriorCache)


@dataclass(frozen=True)
class CacheBuild:
    """A built cache and how fast it was scored (distinct question-candidate pairs read)."""

    table: pyarrow.Table
    pairs: int
    seconds: float

    @property
    def pairs_per_second(self) -> float:
        return self.pairs / self.seconds if self.seconds > 0 else float("inf")


def measure_posterior_cache(
    reader: Reader,
    questions: Sequence[LabelledQuestion],
    candidates_by_setting: Mapping[str, Mapping[str, Sequence[Candidate]]],
    truncation: int,
    config_hash: str,
) -> CacheBuild:
    """Score every candidate of every setting; a PMID shared by settings of one question is
    read once (the same text at the same truncation gives the same posterior)."""
    columns: dict[str, list] = {name: [] for name in POSTERIOR_CACHE_SCHEMA.names}
    pairs = 0
    seconds = 0.0
    for q in questions:
        source = source_pmid(q)
        unique: dict[int, Candidate] = {}
        for setting in SETTINGS:
            if q.qid not in candidates_by_setting.get(setting, {}):
                raise ValueError(f"question {q.qid}: no candidates for setting {setting}")
            for c in candidates_by_setting[setting][q.qid]:
                unique.setdefault(c.pmid, c)
        texts = candidate_texts(list(unique.values()), truncation)
        started = time.perf_counter()
        scored = check_posteriors(reader.posteriors(q.question, texts), len(texts), reader.name)
        seconds += time.perf_counter() - started
        pairs += len(texts)
        row_of = {pmid: i for i, pmid in enumerate(unique)}
        for setting in SETTINGS:
            for c in candidates_by_setting[setting][q.qid]:
                p = scored[row_of[c.pmid]]
                for name, value in (
                    ("question_id", q.qid),
                    ("pmid", c.pmid),
                    ("rank", c.rank),
                    ("is_source", c.pmid == source),
                    ("setting", setting),
                    ("truncation", truncation),
                    ("p_yes", p[0]),
                    ("p_no", p[1]),
                    ("p_maybe", p[2]),
                    ("reader", reader.name),
                    ("config_hash", config_hash),
                ):
                    columns[name].append(value)
    table = pyarrow.Table.from_pydict(columns, schema=POSTERIOR_CACHE_SCHEMA)
    return CacheBuild(table, pairs, seconds)


def build_posterior_cache(
    reader: Reader,
    questions: Sequence[LabelledQuestion],
    candidates_by_setting: Mapping[str, Mapping[str, Sequence[Candidate]]],
    truncation: int,
    config_hash: str,
) -> pyarrow.Table:
    """The cache table (see :func:`measure_posterior_cache` for its throughput)."""
    return measure_posterior_cache(
        reader, questions, candidates_by_setting, truncation, config_hash
    ).table


# -- checks ---------------------------------------------------------------------------------


def check_schema(table: pyarrow.Table) -> CheckOutcome:
    """The pandera model, and the Arrow column names and types."""
    if table.schema.remove_metadata() != POSTERIOR_CACHE_SCHEMA:
        return CheckOutcome(
            "posterior_cache_schema",
            False,
            f"arrow schema {table.schema.to_string()!r} != expected "
            f"{POSTERIOR_CACHE_SCHEMA.to_string()!r}",
        )
    try:
        PosteriorCache.validate(pl.from_arrow(table), lazy=True)
    except (pa.errors.SchemaError, pa.errors.SchemaErrors) as error:
        return CheckOutcome("posterior_cache_schema", False, str(error)[:2000])
    return CheckOutcome("posterior_cache_schema", True, f"{table.num_rows} rows")


def check_alignment(
    table: pyarrow.Table, question_ids: Sequence[str], settings: Sequence[str] = SETTINGS
) -> CheckOutcome:
    """Every question has rows for every setting; ranks run 1..n without a gap; oracle holds
    exactly one row; every question of a setting has the same number of rows (one pool)."""
    frame = pl.from_arrow(table.select(["question_id", "setting", "rank"]))
    expected = set(question_ids)
    problems = []
    extra = sorted(set(frame["question_id"].unique().to_list()) - expected)
    if extra:
        problems.append(f"{len(extra)} questions not in the set, e.g. {extra[:3]}")
    groups = frame.group_by(["question_id", "setting"]).agg(
        pl.len().alias("rows"), pl.col("rank").min().alias("lo"), pl.col("rank").max().alias("hi")
    )
    for setting in settings:
        present = groups.filter(pl.col("setting") == setting)
        missing = sorted(expected - set(present["question_id"].to_list()))
        if missing:
            problems.append(f"{setting}: {len(missing)} questions without rows, e.g. {missing[:3]}")
        gaps = present.filter((pl.col("lo") != 1) | (pl.col("hi") != pl.col("rows")))
        if gaps.height:
            problems.append(
                f"{setting}: ranks not 1..n for {gaps.height} questions, "
                f"e.g. {gaps['question_id'].sort().to_list()[:3]}"
            )
        counts = sorted(set(present["rows"].to_list()))
        if setting == "oracle" and counts not in ([], [1]):
            problems.append(f"oracle: row counts {counts}, expected exactly 1 per question")
        elif len(counts) > 1:
            short = present.filter(pl.col("rows") < counts[-1])["question_id"].sort().to_list()
            problems.append(
                f"{setting}: uneven candidate counts {counts}; short questions e.g. {short[:3]}"
            )
    passed = not problems
    details = (
        f"{len(expected)} questions x {len(settings)} settings aligned"
        if passed
        else "; ".join(problems)
    )
    return CheckOutcome("posterior_cache_alignment", passed, details)


def check_rows_sum_to_one(
    table: pyarrow.Table, tolerance: float = ROW_SUM_TOLERANCE
) -> CheckOutcome:
    """No NaN in p_yes, p_no, p_maybe, and each row sums to 1 within ``tolerance``."""
    values = np.column_stack(
        [table[name].to_numpy(zero_copy_only=False).astype(np.float64) for name in PROBABILITIES]
    )
    ids = table["question_id"].to_pylist()
    ranks = table["rank"].to_pylist()
    settings = table["setting"].to_pylist()
    nan = np.flatnonzero(np.isnan(values).any(axis=1))
    if nan.size:
        i = int(nan[0])
        return CheckOutcome(
            "posterior_rows_sum_to_one",
            False,
            f"{nan.size} rows with NaN, first question {ids[i]} {settings[i]} rank {ranks[i]}",
        )
    sums = values.sum(axis=1)
    off = np.flatnonzero(np.abs(sums - 1.0) > tolerance)
    if off.size:
        i = int(off[0])
        return CheckOutcome(
            "posterior_rows_sum_to_one",
            False,
            f"{off.size} rows not summing to 1 +- {tolerance:g}, first question {ids[i]} "
            f"{settings[i]} rank {ranks[i]} sums to {sums[i]:.7f}",
        )
    return CheckOutcome("posterior_rows_sum_to_one", True, f"{len(sums)} rows sum to 1")


def check_question_recount(table: pyarrow.Table, question_file: str | Path) -> CheckOutcome:
    """DuckDB's count of distinct question ids over the table, per setting, equals the number
    of questions the JSON file holds."""
    path = Path(question_file)
    try:
        in_file = len(json.loads(path.read_text(encoding="utf-8")))
    except (OSError, json.JSONDecodeError) as error:
        return CheckOutcome("posterior_question_recount", False, f"{path}: unreadable ({error})")
    cache = table  # noqa: F841 - DuckDB reads the local Arrow table by name
    connection = duckdb.connect()
    try:
        rows = connection.execute(
            "select setting, count(distinct question_id) from cache group by setting"
        ).fetchall()
        total = connection.execute("select count(distinct question_id) from cache").fetchone()[0]
    finally:
        connection.close()
    per_setting = dict(sorted(rows))
    wrong = {s: n for s, n in per_setting.items() if n != in_file}
    passed = total == in_file and not wrong and set(per_setting) == set(SETTINGS)
    details = f"{path.name}: {in_file} questions; cache {total} distinct, per setting {per_setting}"
    return CheckOutcome("posterior_question_recount", passed, details)


def check_is_source(
    table: pyarrow.Table, source_pmids: Mapping[str, int] | None = None
) -> CheckOutcome:
    """``is_source`` recomputed: pmid == the question's source PMID (its id, unless
    ``source_pmids`` maps it)."""
    ids = table["question_id"].to_pylist()
    pmids = table["pmid"].to_numpy()
    flags = table["is_source"].to_numpy(zero_copy_only=False).astype(bool)
    try:
        sources = np.array(
            [source_pmids[q] if source_pmids is not None else int(q) for q in ids], dtype=np.int64
        )
    except (KeyError, ValueError) as error:
        return CheckOutcome("posterior_is_source", False, f"no source PMID for question {error}")
    wrong = np.flatnonzero((pmids == sources) != flags)
    if wrong.size:
        i = int(wrong[0])
        return CheckOutcome(
            "posterior_is_source",
            False,
            f"{wrong.size} rows with a wrong is_source, first question {ids[i]} pmid "
            f"{int(pmids[i])} flagged {bool(flags[i])}",
        )
    return CheckOutcome("posterior_is_source", True, f"{int(flags.sum())} source rows agree")


def check_posterior_cache(
    table: pyarrow.Table, questions: Sequence[LabelledQuestion], question_file: str | Path
) -> list[CheckOutcome]:
    """Every check, in a fixed order."""
    return [
        check_schema(table),
        check_alignment(table, [q.qid for q in questions]),
        check_rows_sum_to_one(table),
        check_question_recount(table, question_file),
        check_is_source(table, {q.qid: source_pmid(q) for q in questions}),
    ]
