"""The reader in the question path: a cue reader trained on the first 200 real DEV400
questions reads the question graph's evidence articles, whose texts are three other real
DEV400 abstracts (questions 200-202 as titles, their contexts as abstracts). Cited PMIDs
come only from the evidence that was read and validated against the corpus."""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence

import numpy as np
import polars as pl
import pytest

from kg_platform.answer.api import AskConfig, KnowledgeGraph
from kg_platform.answer.readers.base import LABELS, LabelledQuestion, load_pubmedqa
from kg_platform.answer.readers.cues import CueReader, CueRecipe, train_cue_reader
from kg_platform.answer.reading import READER_HINT
from kg_platform.commands.ask import add_parser
from kg_platform.storage.corpus import read_corpus, write_corpus_table
from kg_platform.storage.lake import Lake
from kg_platform_tests.answer.graph_fixture import build_question_graph
from kg_platform_tests.conftest import require_reference

QUESTION = "Does aspirin prevent myocardial infarction?"
# refused at gate 4 (only a terminal without abstract) and at gate 3 (no path)
REFUSED = ("Does heparin treat pulmonary embolism?", "Does warfarin prevent stroke?")
TERMINALS = (100, 300, 400)  # the evidence's terminals in rank order (test_api.py)
# the cue reader's rows for the three articles, in LABELS order (yes, no, maybe)
ROWS = {
    100: (0.590687, 0.283888, 0.125425),
    300: (0.638246, 0.242485, 0.119269),
    400: (0.606989, 0.252223, 0.140788),
}


@pytest.fixture(scope="module")
def dev() -> list[LabelledQuestion]:
    return load_pubmedqa(require_reference("pubmedqa", "pqal_dev400.json"))


@pytest.fixture(scope="module")
def cue_reader(dev) -> CueReader:
    return train_cue_reader(dev[:200], seed=0, recipe=CueRecipe())


def article_texts(dev: list[LabelledQuestion]) -> dict[int, tuple[str, str]]:
    return {pmid: (q.question, q.context) for pmid, q in zip(TERMINALS, dev[200:203], strict=True)}


@pytest.fixture(scope="module")
def read_lake(tmp_path_factory, dev) -> Lake:
    lake = Lake(str(tmp_path_factory.mktemp("read") / "lake"))
    build_question_graph(lake, texts=article_texts(dev))
    return lake


@pytest.fixture(scope="module")
def reader_folder(tmp_path_factory, cue_reader) -> str:
    folder = tmp_path_factory.mktemp("reader") / "cues"
    cue_reader.save(folder)
    return str(folder)


class CountingReader:
    """The real cue reader, counting its calls and keeping the texts it was given."""

    def __init__(self, reader: CueReader) -> None:
        self.reader, self.name, self.calls, self.texts = reader, "counting", 0, []

    def posteriors(self, question: str, texts: Sequence[str]) -> np.ndarray:
        self.calls += 1
        self.texts.append(list(texts))
        return self.reader.posteriors(question, texts)


def corpus_pmids(lake: Lake) -> set[int]:
    return set(pl.from_arrow(read_corpus(lake, "articles"))["pmid"].to_list())


def test_reader_answers_from_the_evidence(read_lake, cue_reader, dev) -> None:
    answer = KnowledgeGraph.open(read_lake, reader=cue_reader).ask(QUESTION)
    reading = answer.reading
    assert [e.path.terminal.pmid for e in answer.evidence] == list(TERMINALS)
    assert reading.cited == list(TERMINALS)
    for article in reading.read:
        np.testing.assert_allclose(article.posterior, ROWS[article.pmid], atol=1e-5)
    # the same rows from the DEV texts themselves, joined as documented (title \n abstract)
    texts = [f"{q.question}\n{q.context}"[:3000] for q in dev[200:203]]
    rows = cue_reader.posteriors(QUESTION, texts)
    np.testing.assert_array_equal(np.array([a.posterior for a in reading.read], np.float32), rows)
    # mean of the three rows; yes is the largest
    assert reading.label == "yes"
    assert reading.probability == pytest.approx(0.611974, abs=1e-5)
    np.testing.assert_allclose(reading.posterior, rows.astype(np.float64).mean(axis=0))
    doc = json.loads(json.dumps(answer.to_json()))
    assert doc["schema_version"] == 6
    assert list(doc)[-4:] == ["grounder", "answer", "answer_reason", "start_up_ms"]
    assert doc["answer_reason"] is None
    assert list(doc["answer"]) == [
        "label", "probability", "posteriors", "rule", "k", "reader", "read", "dropped",
    ]  # fmt: skip
    assert (doc["answer"]["rule"], doc["answer"]["k"], doc["answer"]["reader"]) == (
        "mean",
        3,
        "cues",
    )
    assert doc["answer"]["read"][0] == {
        "pmid": 100,
        "p_yes": pytest.approx(ROWS[100][0], abs=1e-5),
        "p_no": pytest.approx(ROWS[100][1], abs=1e-5),
        "p_maybe": pytest.approx(ROWS[100][2], abs=1e-5),
    }
    assert list(doc["answer"]["posteriors"]) == list(LABELS)
    assert doc["answer"]["dropped"] == []
    assert "read" in answer.timings_ms


def test_k_and_truncation_are_configurable(read_lake, cue_reader, dev) -> None:
    counting = CountingReader(cue_reader)
    kg = KnowledgeGraph.open(read_lake, AskConfig(reader_k=1, reader_chars=60), reader=counting)
    reading = kg.ask(QUESTION).reading
    cut = f"{dev[200].question}\n{dev[200].context}"[:60]
    assert counting.texts == [[cut]]
    assert reading.cited == [100] and reading.k == 1
    short = cue_reader.posteriors(QUESTION, [cut])[0]
    np.testing.assert_array_equal(np.array(reading.read[0].posterior, np.float32), short)
    # the cut changed what the reader saw: its row is not the full text's
    assert not np.allclose(short, ROWS[100], atol=1e-3)
    with pytest.raises(ValueError, match="reader k 0: must be at least 1"):
        AskConfig(reader_k=0)


def test_a_refusal_is_never_read(read_lake, cue_reader) -> None:
    counting = CountingReader(cue_reader)
    kg = KnowledgeGraph.open(read_lake, reader=counting)
    for question in REFUSED:
        answer = kg.ask(question)
        assert not answer.verdict.answerable, question
        assert answer.reading.label is None and answer.reading.cited == []
        doc = answer.to_json()
        assert doc["answer"] is None
        assert doc["answer_reason"]["code"] == "refused"
    assert counting.calls == 0
    kg.ask(QUESTION)  # the counter counts: an answerable question is read once
    assert counting.calls == 1


def test_without_a_reader_the_answer_says_how_to_get_one(read_lake) -> None:
    answer = KnowledgeGraph.open(read_lake).ask(QUESTION)
    assert answer.verdict.answerable and answer.reading.label is None
    assert answer.to_json()["answer"] is None
    assert answer.to_json()["answer_reason"] == {
        "code": "no_reader",
        "detail": READER_HINT,
        "dropped": [],
    }
    assert answer.reading.render() == f"Answer: none (no_reader): {READER_HINT}"


class HostileReader:
    """Tries to cite what it was not given: PMIDs in its name and metadata, the texts list
    it is handed rewritten, and (``extra_row``) one row more than it was asked for."""

    metadata = {"pmids": [999999], "read": [{"pmid": 999999}]}
    pmids = [999999]

    def __init__(self, reader: CueReader, extra_row: bool = False) -> None:
        self.reader, self.extra_row = reader, extra_row
        self.name = "PMID 999999"

    def posteriors(self, question: str, texts: Sequence[str]) -> np.ndarray:
        rows = self.reader.posteriors(question, texts)
        if isinstance(texts, list):
            texts[:] = ["PMID 999999"] * (len(texts) + 1)
        if self.extra_row:
            rows = np.vstack([rows, rows[:1]])
        return rows


def pmids_in(value: object) -> set[int]:
    """Every value under a ``pmid`` key, at any depth."""
    if isinstance(value, dict):
        found = {value["pmid"]} if "pmid" in value else set()
        return found.union(*(pmids_in(v) for v in value.values()))
    if isinstance(value, list):
        return set().union(*(pmids_in(v) for v in value))
    return set()


def test_a_reader_cannot_inject_a_pmid(read_lake, cue_reader) -> None:
    hostile = HostileReader(cue_reader)
    answer = KnowledgeGraph.open(read_lake, reader=hostile).ask(QUESTION)
    evidence = {e.path.terminal.pmid for e in answer.evidence}
    assert answer.reading.cited == list(TERMINALS)
    assert set(answer.reading.cited) <= evidence & corpus_pmids(read_lake)
    assert [r["pmid"] for r in answer.to_json()["answer"]["read"]] == list(TERMINALS)
    # no PMID anywhere in the answer but the ones read
    assert pmids_in(answer.to_json()["answer"]) == set(TERMINALS)
    # one row too many: the output breaks the contract, nothing is cited
    answer = KnowledgeGraph.open(read_lake, reader=HostileReader(cue_reader, True)).ask(QUESTION)
    assert answer.reading.cited == [] and answer.to_json()["answer"] is None
    assert answer.to_json()["answer_reason"]["code"] == "reader_error"
    shape = "posteriors shape (4, 3), expected (3, 3)"
    assert answer.reading.detail == f"reader PMID 999999: {shape}"


def drop_from_corpus(lake: Lake, pmids: set[int]) -> None:
    articles = pl.from_arrow(read_corpus(lake, "articles"))
    kept = articles.filter(~pl.col("pmid").is_in(list(pmids))).to_arrow()
    write_corpus_table(lake, "articles", kept)


def test_terminals_missing_from_the_corpus_or_without_text_are_dropped(
    tmp_path, cue_reader, dev
) -> None:
    lake = Lake(str(tmp_path / "lake"))
    texts = article_texts(dev)
    build_question_graph(lake, texts={**texts, 400: ("", "  ")})
    drop_from_corpus(lake, {300})  # the graph still has 300 as a terminal
    counting = CountingReader(cue_reader)
    answer = KnowledgeGraph.open(lake, reader=counting).ask(QUESTION)
    evidence = [e.path.terminal.pmid for e in answer.evidence]
    assert evidence == list(TERMINALS)
    assert 300 not in corpus_pmids(lake)
    reading = answer.reading
    assert reading.cited == [100]
    assert set(reading.cited) <= set(evidence) & corpus_pmids(lake)
    assert [(d.pmid, d.reason) for d in reading.dropped] == [
        (300, "not_in_corpus"),
        (400, "no_text"),
    ]
    assert counting.texts == [[f"{dev[200].question}\n{dev[200].context}"[:3000]]]
    np.testing.assert_allclose(reading.posterior, ROWS[100], atol=1e-5)
    assert answer.to_json()["answer"]["dropped"] == [
        {"pmid": 300, "reason": "not_in_corpus"},
        {"pmid": 400, "reason": "no_text"},
    ]
    # none left: no answer, the reason names each PMID, and the reader is not called
    drop_from_corpus(lake, {100})
    counting = CountingReader(cue_reader)
    answer = KnowledgeGraph.open(lake, reader=counting).ask(QUESTION)
    assert answer.verdict.answerable and answer.reading.cited == []
    assert counting.calls == 0
    assert answer.to_json()["answer"] is None
    assert answer.to_json()["answer_reason"] == {
        "code": "no_readable_evidence",
        "detail": "no evidence article could be read "
        "(100 not_in_corpus, 300 not_in_corpus, 400 no_text)",
        "dropped": [
            {"pmid": 100, "reason": "not_in_corpus"},
            {"pmid": 300, "reason": "not_in_corpus"},
            {"pmid": 400, "reason": "no_text"},
        ],
    }


def ask(*argv: str) -> int:
    parser = argparse.ArgumentParser()
    add_parser(parser.add_subparsers())
    args = parser.parse_args(["ask", *argv])
    return args.func(args)


def test_cli_reader_flag_and_setting(read_lake, reader_folder, monkeypatch, capsys) -> None:
    monkeypatch.delenv("KG_READER", raising=False)
    assert ask(QUESTION, "--json", "--lake", read_lake.root, "--reader", reader_folder) == 0
    doc = json.loads(capsys.readouterr().out)
    assert (doc["schema_version"], doc["answer"]["label"]) == (6, "yes")
    assert [r["pmid"] for r in doc["answer"]["read"]] == list(TERMINALS)
    assert list(doc)[-4:] == ["answer", "answer_reason", "start_up_ms", "partition"]
    # the same reader from KG_READER, in the text output
    monkeypatch.setenv("KG_READER", reader_folder)
    assert ask(QUESTION, "--lake", read_lake.root) == 0
    out = capsys.readouterr().out
    assert (
        "Answer: yes (p=0.612, mean of 3 read by cues); read PMIDs "
        "100 (yes 0.59 no 0.28 maybe 0.13), 300 (yes 0.64 no 0.24 maybe 0.12), "
        "400 (yes 0.61 no 0.25 maybe 0.14)\n"
    ) in out
    # a refusal prints no label
    assert ask(REFUSED[0], "--lake", read_lake.root) == 0
    assert "Answer: none (refused): " in capsys.readouterr().out
    monkeypatch.delenv("KG_READER")
    assert ask(QUESTION, "--lake", read_lake.root) == 0
    assert f"Answer: none (no_reader): {READER_HINT}\n" in capsys.readouterr().out


def test_cli_bad_reader_is_named(read_lake, tmp_path, monkeypatch, capsys) -> None:
    missing = tmp_path / "no-such-reader"
    monkeypatch.delenv("KG_READER", raising=False)
    assert ask(QUESTION, "--lake", read_lake.root, "--reader", str(missing)) == 2
    assert capsys.readouterr() == ("", f"kg ask: --reader: {missing}: reader folder not found\n")
    monkeypatch.setenv("KG_READER", str(tmp_path))
    assert ask(QUESTION, "--lake", read_lake.root) == 2
    assert capsys.readouterr().err == (
        f"kg ask: KG_READER: {tmp_path}: neither reader.json nor a Hugging Face config.json\n"
    )


def test_build_summary_answers_its_examples(read_lake, reader_folder, tmp_path, capsys) -> None:
    from kg_platform.commands.build_report import print_examples

    question = "Is there a link between Aspirin and Myocardial Infarction?"
    print_examples(read_lake, reader_folder)
    answer = KnowledgeGraph.open(read_lake, reader=loaded_reader(reader_folder)).ask(question)
    assert answer.reading.label == "yes"
    assert capsys.readouterr().out == (
        "questions this graph answers, e.g.:\n"
        f'  kg ask "{question}"\n'
        f"    {answer.reading.render()}\n"
    )
    print_examples(read_lake)
    lines = ["questions this graph answers, e.g.:", f'  kg ask "{question}"']
    assert capsys.readouterr().out == "\n".join([*lines, f"answers: {READER_HINT}", ""])
    print_examples(read_lake, str(tmp_path / "gone"))
    assert capsys.readouterr().out == (
        f"no answers: KG_READER: {tmp_path / 'gone'}: reader folder not found\n"
        "questions this graph answers, e.g.:\n"
        f'  kg ask "{question}"\n'
    )


def loaded_reader(folder: str) -> CueReader:
    from kg_platform.answer.readers.loading import load_reader

    reader = load_reader(folder)
    assert isinstance(reader, CueReader)
    return reader


def test_kg_reader_is_resolved_in_settings(kg_home, monkeypatch, reader_folder) -> None:
    from kg_platform.settings import Settings
    from kg_platform.settings import reader_folder as resolved

    assert (resolved(), Settings.load().reader) == ("", "")  # kg_home clears KG_READER
    monkeypatch.setenv("KG_READER", f" {reader_folder} ")
    assert resolved() == Settings.load().reader == reader_folder
