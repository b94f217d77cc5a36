from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from kg_platform.checks import CheckOutcome
from kg_platform.evaluation.pubmedqa.candidates import build_candidates, pool_from_questions
from kg_platform.evaluation.pubmedqa.posterior_cache import (
    POSTERIOR_CACHE_SCHEMA,
    check_alignment,
    check_is_source,
    check_posterior_cache,
    check_question_recount,
    check_rows_sum_to_one,
    check_schema,
    measure_posterior_cache,
)
from kg_platform_tests.evaluation.pubmedqa.fixtures import LexicalReader, dev_questions


def verdict(outcome: CheckOutcome) -> tuple[str, bool, str]:
    return outcome.name, outcome.passed, outcome.details


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    questions = dev_questions()
    pool = pool_from_questions(questions)
    subset = questions[:10]
    candidates = build_candidates(subset, pool)
    build = measure_posterior_cache(LexicalReader(), subset, candidates, 1100, "cfg")
    source = json.loads(dev_file_text())
    path = tmp_path_factory.mktemp("q") / "dev10.json"
    path.write_text(json.dumps({q.qid: source[q.qid] for q in subset}))
    return subset, build, path


def dev_file_text() -> str:
    from kg_platform_tests.evaluation.pubmedqa.fixtures import dev_file

    return dev_file().read_text()


def test_cache_rows_and_throughput(built):
    questions, build, _ = built
    table = build.table
    assert table.schema == POSTERIOR_CACHE_SCHEMA
    # 10 x (1 oracle + 16 retrieved + 16 leak-free)
    assert table.num_rows == 330
    # oracle and retrieved share the source; leak-free adds its 17th document
    assert build.pairs == 170
    assert build.pairs_per_second > 0
    assert pc.sum(table["is_source"]).as_py() == 20
    assert set(table["truncation"].to_pylist()) == {1100}


def test_all_checks_pass_on_a_real_cache(built):
    questions, build, path = built
    results = check_posterior_cache(build.table, questions, path)
    assert [(r.name, r.passed) for r in results] == [
        ("posterior_cache_schema", True),
        ("posterior_cache_alignment", True),
        ("posterior_rows_sum_to_one", True),
        ("posterior_question_recount", True),
        ("posterior_is_source", True),
    ]


def _set(table: pa.Table, column: str, row: int, value) -> pa.Table:
    values = table[column].to_pylist()
    values[row] = value
    return table.set_column(
        table.schema.get_field_index(column),
        column,
        pa.array(values, table.schema.field(column).type),
    )


def test_dropped_rows_are_named(built):
    questions, build, path = built
    table = build.table
    ids = [q.qid for q in questions]
    # row 2 is rank 2 of the first question's retrieved list: a gap
    gap = table.take([i for i in range(table.num_rows) if i != 2])
    name, passed, details = verdict(check_alignment(gap, ids))
    assert not passed and "retrieved: ranks not 1..n for 1 questions" in details
    assert "2503176" in details
    # the first question's oracle row gone: missing setting
    no_oracle = table.take([i for i in range(table.num_rows) if i != 0])
    _, passed, details = verdict(check_alignment(no_oracle, ids))
    assert not passed and "oracle: 1 questions without rows, e.g. ['2503176']" in details
    # the last rank dropped: uneven counts
    last = table.take(list(range(table.num_rows - 1)))
    _, passed, details = verdict(check_alignment(last, ids))
    assert not passed and "leak_free: uneven candidate counts [15, 16]" in details
    # a whole question gone: the DuckDB recount disagrees with the file
    fewer = table.filter(pc.not_equal(table["question_id"], "2503176"))
    _, passed, details = verdict(check_question_recount(fewer, path))
    assert not passed and "10 questions; cache 9 distinct" in details


def test_nan_and_bad_sum_are_named(built):
    _, build, _ = built
    nan = _set(build.table, "p_yes", 5, float("nan"))
    _, passed, details = verdict(check_rows_sum_to_one(nan))
    assert not passed and details.startswith("1 rows with NaN, first question 2503176")
    off = _set(build.table, "p_no", 7, 0.999)
    _, passed, details = verdict(check_rows_sum_to_one(off))
    assert not passed and "1 rows not summing to 1" in details and "rank 7" in details


def test_wrong_is_source_is_named(built):
    _, build, _ = built
    flipped = _set(build.table, "is_source", 3, True)
    _, passed, details = verdict(check_is_source(flipped))
    assert not passed
    assert details.startswith("1 rows with a wrong is_source, first question 2503176")


def test_schema_names_the_bad_column(built):
    _, build, _ = built
    bad = _set(build.table, "setting", 0, "oracle_plus")
    name, passed, details = verdict(check_schema(bad))
    assert name == "posterior_cache_schema" and not passed and "setting" in details
    wrong_type = build.table.set_column(0, "question_id", pa.array(np.arange(330)))
    _, passed, details = verdict(check_schema(wrong_type))
    assert not passed and "arrow schema" in details
