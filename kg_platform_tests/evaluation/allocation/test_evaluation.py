import base64
import hashlib
import json
import re

import dagster as dg
import numpy as np
import pytest

from kg_platform.cli import main
from kg_platform.evaluation.allocation.evaluation import (
    REPORT_FILES,
    render_markdown,
    run_allocation_eval,
    summary,
    write_report,
)
from kg_platform.evaluation.allocation.hotpotqa import (
    bm25_rankings,
    build_title_mention_graph,
    count_tokens,
    load_hotpotqa,
    mention_name,
)
from kg_platform.evaluation.common.stats import outcomes_sha256
from kg_platform.retrieval.allocation import ARMS
from kg_platform_tests.conftest import require_reference

QUESTIONS_SHA256 = "258b930b1ea56569a877134598cb13da9c79e6110c4ed3e8d39027c49b61d76b"
GRAPH_SHA256 = "30c5ce252af6f8604889e9e948eaed665676fa8021e3095257df9de40a2a03f5"


@pytest.fixture(scope="module")
def hotpotqa_path():
    return require_reference("hotpotqa", "hotpot_dev_distractor_first60.json")


@pytest.fixture(scope="module")
def result(hotpotqa_path):
    return run_allocation_eval(hotpotqa_path)


def test_loader_corpus_and_graph_on_the_reference_file(hotpotqa_path):
    dataset = load_hotpotqa(hotpotqa_path)
    assert dataset.sha256 == QUESTIONS_SHA256
    assert dataset.sha256 == hashlib.sha256(hotpotqa_path.read_bytes()).hexdigest()
    assert len(dataset.questions) == 60
    assert [q.kind for q in dataset.questions].count("bridge") == 45
    # 592 listed paragraphs; "Loan modification in the United States" is listed twice, identically
    assert len(dataset.corpus) == 591
    assert sum(len(q.context_ids) for q in dataset.questions) == 592
    assert float(np.median(dataset.corpus.token_lengths)) == 85.0
    first = dataset.questions[0]
    assert first.supporting_titles == ("Scott Derrickson", "Ed Wood")
    assert [dataset.corpus.titles[i] for i in first.supporting_ids] == list(first.supporting_titles)
    i = first.supporting_ids[0]
    assert dataset.corpus.token_lengths[i] == count_tokens(dataset.corpus.reader_text(i))

    graph = build_title_mention_graph(dataset.corpus)
    assert graph.n_edges == 368
    assert graph.sha256() == GRAPH_SHA256
    titles = dataset.corpus.titles
    kiss = titles.index("Kiss and Tell (1945 film)")
    assert [titles[j] for j in graph.neighbours(kiss)] == ["Shirley Temple"]


def test_mention_names_drop_the_disambiguator():
    assert mention_name("Ed Wood (film)") == "Ed Wood"
    assert mention_name("Deliver Us from Evil (2014 film)") == "Deliver Us from Evil"
    assert mention_name("Woodson, Arkansas") == "Woodson, Arkansas"


def test_bm25_ranks_the_whole_corpus(hotpotqa_path):
    dataset = load_hotpotqa(hotpotqa_path)
    rankings = bm25_rankings(dataset.corpus, [q.question for q in dataset.questions[:3]])
    assert all(sorted(r.tolist()) == list(range(591)) for r in rankings)
    # question 1 (Kiss and Tell): its film paragraph first, Shirley Temple far down
    kiss, temple = dataset.questions[1].supporting_ids
    assert rankings[1][0] == kiss
    assert int(np.where(rankings[1] == temple)[0][0]) == 137


def test_exact_recovery_counts_on_the_reference_file(result):
    counts = {
        b.max_objects: {arm: sum(b.arms[arm].recovered) for arm in ARMS} for b in result.budgets
    }
    assert counts == {
        2: {"flat": 6, "relational": 15, "random_neighbour": 3, "shuffled_graph": 4},
        4: {"flat": 21, "relational": 37, "random_neighbour": 17, "shuffled_graph": 14},
    }
    assert [b.max_tokens for b in result.budgets] == [170, 340]
    bridge = np.asarray(result.question_kinds) == "bridge"
    by_stratum = {
        b.max_objects: {arm: b.arms[arm].recovery(bridge)[0] for arm in ("flat", "relational")}
        for b in result.budgets
    }
    assert by_stratum == {2: {"flat": 3, "relational": 13}, 4: {"flat": 12, "relational": 27}}


def test_both_ceilings_hold_for_every_arm_and_question(hotpotqa_path, result):
    lengths = load_hotpotqa(hotpotqa_path).corpus.token_lengths
    for budget in result.budgets:
        assert budget.ceiling_violations == 0
        for arm in ARMS:
            outcome = budget.arms[arm]
            assert len(outcome.admitted) == 60
            for admitted, objects, tokens in zip(
                outcome.admitted, outcome.realised_objects, outcome.realised_tokens, strict=True
            ):
                assert objects == len(admitted) <= budget.max_objects
                assert tokens == int(lengths[list(admitted)].sum()) <= budget.max_tokens


def test_comparisons_carry_statistics_and_identities(result):
    assert len(result.comparisons) == 10
    flat_2 = result.comparisons[0]
    assert (flat_2["label"], flat_2["stratum"]) == ("relational vs flat @ K=2,T=170", "all")
    assert (flat_2["improve"], flat_2["tie"], flat_2["harm"]) == (11, 47, 2)
    assert flat_2["risk_difference"] == pytest.approx(9 / 60)
    assert flat_2["mcnemar_p"] == pytest.approx(2 * (1 + 13 + 78) / 2**13)
    ids = result.question_ids
    budget = result.budgets[0]
    assert flat_2["outcomes_sha256"] == outcomes_sha256(
        ids,
        relational=np.asarray(budget.arms["relational"].recovered),
        flat=np.asarray(budget.arms["flat"].recovered),
    )
    for record in result.comparisons:
        assert record["questions_sha256"] == QUESTIONS_SHA256
        assert record["graph_sha256"] == GRAPH_SHA256
        assert len(record["outcomes_sha256"]) == 64
        assert record["bootstrap_resamples"] == 10_000
        assert record["ci_lower"] <= record["risk_difference"] <= record["ci_upper"]
        if "shuffled_graph" in record["label"]:
            assert record["shuffled_graph_sha256"] == result.shuffled_graph_sha256
    decisions = {
        (c["max_objects"], c["control"], c["stratum"]): c["decision"] for c in result.comparisons
    }
    assert decisions[(4, "flat", "all")] == "WIN"
    assert decisions[(2, "flat", "all")] == "INCONCLUSIVE"


def test_summary_and_report_files(result, tmp_path):
    brief = summary(result)
    assert [b["max_objects"] for b in brief["budgets"]] == [2, 4]
    assert brief["budgets"][0]["recovery"]["relational"]["rate"] == 0.25
    flat_2 = result.budgets[0].arms["flat"]
    assert brief["budgets"][0]["recovery"]["flat"]["outcomes_sha256"] == outcomes_sha256(
        result.question_ids, flat=np.asarray(flat_2.recovered)
    )
    assert brief["budgets"][1]["rd_relational_minus_flat"]["bridge"]["rd"] == pytest.approx(15 / 45)
    written = {}
    digests = write_report(result, written.__setitem__)
    assert list(written) == ["recovery.png", "allocation.json", "summary.json", "report.md"]
    assert set(written) == set(REPORT_FILES)
    assert written["recovery.png"][:8] == b"\x89PNG\r\n\x1a\n"
    assert digests["summary.json"] == hashlib.sha256(written["summary.json"]).hexdigest()
    full = json.loads(written["allocation.json"])
    assert full["questions_sha256"] == QUESTIONS_SHA256
    assert full["config"]["relational"]["on_overflow"] == "stop"
    report = written["report.md"].decode()
    assert "| 2 | 170 | relational | 15/60 (25.0%)" in report
    assert embedded_pngs(report) == [written["recovery.png"]]
    assert not re.search(r"""(src=["']?|\]\()(?!data:)[^"')]*\.png""", report)
    assert render_markdown(result) == report  # default: renders the same plot itself


def test_loader_reads_python_literal_fields_and_names_bad_input(hotpotqa_path, tmp_path):
    records = json.loads(hotpotqa_path.read_text())[:2]
    for record in records:
        record["supporting_facts"] = repr(record["supporting_facts"])
        record["context"] = repr(record["context"])
    literal = tmp_path / "literal.json"
    literal.write_text(json.dumps(records))
    dataset = load_hotpotqa(literal)
    assert len(dataset.questions) == 2
    assert dataset.questions[1].supporting_titles == ("Kiss and Tell (1945 film)", "Shirley Temple")

    broken = tmp_path / "broken.json"
    broken.write_text("{not json")
    with pytest.raises(ValueError, match="broken.json: not a JSON file"):
        load_hotpotqa(broken)
    records[0]["supporting_facts"] = repr({"title": ["Nowhere"], "sent_id": [0]})
    absent = tmp_path / "absent.json"
    absent.write_text(json.dumps(records))
    with pytest.raises(
        ValueError, match=r"absent.json: question 0: supporting-fact title\(s\) \['Nowhere'\]"
    ):
        load_hotpotqa(absent)
    del records[1]["context"]
    missing = tmp_path / "missing.json"
    missing.write_text(json.dumps(records[1:]))
    with pytest.raises(ValueError, match=r"question 0: missing field\(s\) \['context'\]"):
        load_hotpotqa(missing)
    with pytest.raises(ValueError, match="HotpotQA file not found"):
        load_hotpotqa(tmp_path / "nope.json")


def test_kg_eval_allocation_materialises_the_report_on_the_instance(
    hotpotqa_path, eval_home, tmp_path, capsys
):
    out = tmp_path / "report"
    assert main(["eval", "allocation", "--hotpotqa", str(hotpotqa_path), "--json",
                 "--out", str(out)]) == 0  # fmt: skip
    printed = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert printed["budgets"][0]["recovery"]["flat"]["recovered"] == 6
    assert printed["budgets"][1]["rd_relational_minus_flat"]["all"]["improve_tie_harm"] == [
        19,
        38,
        3,
    ]
    question_set = f"hotpot_dev_distractor_first60-{QUESTIONS_SHA256[:8]}"
    partition = {"question_set": question_set, "configuration": "matched_ceilings"}
    assert printed["partition"] == partition

    instance = dg.DagsterInstance.from_config(str(eval_home / "dagster"))
    event = instance.get_latest_materialization_event(dg.AssetKey("allocation_report"))
    assert event.dagster_event.partition == f"matched_ceilings|{question_set}"
    checks = instance.get_records_for_run(
        event.run_id, of_type=dg.DagsterEventType.ASSET_CHECK_EVALUATION
    ).records
    assert {
        (e.check_name, e.passed)
        for e in (r.event_log_entry.dagster_event.event_specific_data for r in checks)
    } == {("ceilings_respected", True), ("identities_recorded", True)}
    metadata = event.asset_materialization.metadata
    assert "| 4 | 340 | relational | 37/60 (61.7%)" in metadata["report"].value
    assert metadata["questions_sha256"].value == QUESTIONS_SHA256
    folder = tmp_path / "kg" / "lake" / "reports" / "allocation" / question_set / "matched_ceilings"
    assert sorted(p.name for p in folder.iterdir()) == sorted(REPORT_FILES)
    # --out holds a copy of the published files
    assert {p.name: p.read_bytes() for p in out.iterdir()} == {
        p.name: p.read_bytes() for p in folder.iterdir()
    }
    png = (folder / "recovery.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    assert embedded_pngs(metadata["report"].value) == [png]
    assert embedded_pngs((folder / "report.md").read_text()) == [png]

    before = (out / "report.md").read_bytes()
    missing = tmp_path / "nope.json"
    assert main(["eval", "allocation", "--hotpotqa", str(missing), "--out", str(out)]) == 2
    assert f"kg eval allocation: {missing}: HotpotQA file not found" in capsys.readouterr().err
    assert (out / "report.md").read_bytes() == before


def embedded_pngs(markdown: str) -> list[bytes]:
    """The PNGs a markdown report embeds as ``data:image/png;base64`` URIs."""
    return [
        base64.b64decode(m, validate=True)
        for m in re.findall(r"data:image/png;base64,([A-Za-z0-9+/=]+)", markdown)
    ]


def test_the_configuration_dimension_is_the_studys_configurations():
    from kg_platform.assets.partitions import allocation_configurations
    from kg_platform.evaluation.allocation.evaluation import CONFIGURATIONS

    assert allocation_configurations.get_partition_keys() == ["matched_ceilings"]
    assert CONFIGURATIONS["matched_ceilings"].budgets == (2, 4)
