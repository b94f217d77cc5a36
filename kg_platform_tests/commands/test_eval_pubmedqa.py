"""`kg eval pubmedqa` end to end through the persistent instance, on a DEV/TEST split cut from
the real DEV400 file, and its one-line errors for inputs that cannot be a split."""

from __future__ import annotations

import contextlib
import io
import json
from collections import Counter
from pathlib import Path
from types import SimpleNamespace

import dagster as dg
import pytest

from kg_platform.answer.readers.base import load_pubmedqa, training_set_hash
from kg_platform.answer.readers.loading import load_reader
from kg_platform.cli import main
from kg_platform.evaluation.common.trained import read_trained_reader
from kg_platform.storage.lake import Lake
from kg_platform_tests.conftest import require_reference, use_kg_home

DEV_N, TEST_N, K = 40, 30, 4
OPTIONS = ["--folds", "3", "--shuffled-seeds", "2", "--candidates", str(K), "--truncations", "3000"]


def write_questions(path: Path, pmids: list[str]) -> Path:
    records = json.loads(require_reference("pubmedqa", "pqal_dev400.json").read_text())
    path.write_text(json.dumps({p: records[p] for p in pmids}))
    return path


def sorted_pmids() -> list[str]:
    return sorted(
        json.loads(require_reference("pubmedqa", "pqal_dev400.json").read_text()), key=int
    )


@pytest.fixture(scope="module")
def evaluated(tmp_path_factory):
    """One `kg eval pubmedqa --json` run on the 70 lowest PMIDs without --test: 30 of them
    held out (stratified by label), the reader trained and selected on the other 40."""
    folder = tmp_path_factory.mktemp("eval_pubmedqa")
    pmids = sorted_pmids()
    given = write_questions(folder / "dev70.json", pmids[: DEV_N + TEST_N])
    home = folder / "kg"
    stdout, stderr = io.StringIO(), io.StringIO()
    with pytest.MonkeyPatch.context() as mp:
        use_kg_home(mp, home)
        # prepare_instance sets DAGSTER_HOME for the process: restore it afterwards
        mp.setenv("DAGSTER_HOME", str(home / "dagster"))
        with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
            code = main(["eval", "pubmedqa", "--dev", str(given), "--held-out", str(TEST_N),
                         "--json", *OPTIONS])  # fmt: skip
    lines = stdout.getvalue().strip().splitlines()
    progress = stderr.getvalue().splitlines()
    dev = home / "questions" / f"dev70-fit{DEV_N}-seed0.json"
    test = home / "questions" / f"dev70-heldout{TEST_N}-seed0.json"
    return SimpleNamespace(
        code=code, home=home, given=given, dev=dev, test=test, lines=lines, progress=progress
    )


def test_without_test_a_stratified_part_of_dev_is_held_out(evaluated) -> None:
    given = {q.qid: q.label for q in load_pubmedqa(evaluated.given)}
    dev = {q.qid: q.label for q in load_pubmedqa(evaluated.dev)}
    test = {q.qid: q.label for q in load_pubmedqa(evaluated.test)}
    assert (len(dev), len(test)) == (DEV_N, TEST_N)
    assert set(dev).isdisjoint(test) and set(dev) | set(test) == set(given)
    # 39 yes, 25 no, 6 maybe of 70: 30 held out in proportion, largest remainders
    assert Counter(given.values()) == {"yes": 39, "no": 25, "maybe": 6}
    assert Counter(test.values()) == {"yes": 17, "no": 11, "maybe": 2}
    # with --json the JSON line is all stdout holds; stderr a line before and after each of
    # the four steps, and none of Dagster's own log
    assert len(evaluated.lines) == 1
    steps = ["reader_model", "posterior_cache", "posterior_cache", "pubmedqa_report"]
    assert [line.split(" ")[:2] for line in evaluated.progress] == [
        pair
        for n, step in enumerate(steps, 1)
        for pair in ([f"[{n}/4]", step], [f"[{n}/4]", f"{step}:"])
    ], evaluated.progress
    assert all(" ok in " in line for line in evaluated.progress[1::2])


def test_last_line_is_the_json_contract(evaluated) -> None:
    assert evaluated.code == 0
    summary = json.loads(evaluated.lines[-1])
    assert summary["test"]["n"] == TEST_N
    assert summary["test"]["setting"] == "leak_free"
    assert summary["selected"] == "cues|leak_free|t3000|mean@1"
    lo, hi = summary["test"]["ci95"]
    assert lo <= summary["test"]["accuracy"] <= hi
    assert set(summary["test"]) == {"n", "setting", "accuracy", "ci95", "macro_f1"}
    assert sorted(summary["settings"]) == ["leak_free", "oracle", "retrieved"]
    for figures in summary["settings"].values():
        assert set(figures) == {"accuracy", "ci95", "macro_f1"} and len(figures["ci95"]) == 2
    # the selected configuration's own setting is the headline
    assert summary["settings"]["leak_free"]["accuracy"] == summary["test"]["accuracy"]
    controls = summary["controls"]
    assert set(controls) == {"majority", "blind", "shuffled_label_best", "shuffled_label_n"}
    # 2 seeds x 2 selectable settings x 1 truncation x 3 rules
    assert controls["shuffled_label_n"] == 12
    # the DEV majority label (yes) on TEST: 17 of the 30 TEST questions are yes
    test_labels = [q.label for q in load_pubmedqa(evaluated.test)]
    assert controls["majority"] == test_labels.count("yes") / TEST_N == 17 / 30
    # the trained reader's folder, for `kg ask --reader`
    partition = summary["partition"]
    record = read_trained_reader(Lake(str(evaluated.home / "lake")), partition["reader_config"])
    assert summary["reader_folder"] == str(evaluated.home / "lake" / record["model_prefix"])
    folder = Path(summary["reader_folder"])
    saved = sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file())
    assert saved == record["files"]
    # and it is a reader `kg ask --reader` loads
    assert load_reader(str(folder)).name == "cues"


def test_runs_are_on_the_persistent_instance(evaluated) -> None:
    summary = json.loads(evaluated.lines[-1])
    partition = summary["partition"]
    instance = dg.DagsterInstance.from_config(str(evaluated.home / "dagster"))
    assert instance.get_dynamic_partitions("reader_configs") == [partition["reader_config"]]
    assert sorted(instance.get_dynamic_partitions("pubmedqa_sets")) == sorted(
        [partition["dev"], partition["test"]]
    )
    materialized = {
        asset: sorted(instance.get_materialized_partitions(dg.AssetKey(asset)))
        for asset in ("reader_model", "posterior_cache", "pubmedqa_report")
    }
    config, dev, test = partition["reader_config"], partition["dev"], partition["test"]
    assert materialized == {
        "reader_model": [config],
        "posterior_cache": sorted([f"{dev}|{config}", f"{test}|{config}"]),
        "pubmedqa_report": [f"{test}|{config}"],
    }


def test_the_reader_trains_on_dev_only(evaluated) -> None:
    partition = json.loads(evaluated.lines[-1])["partition"]
    record = read_trained_reader(Lake(str(evaluated.home / "lake")), partition["reader_config"])
    assert record["training_set"] == partition["dev"]
    assert record["training_set_hash"] == training_set_hash(load_pubmedqa(evaluated.dev))
    assert record["training_set_hash"] != training_set_hash(load_pubmedqa(evaluated.test))
    assert record["n_train"] == DEV_N


def test_the_held_out_part_of_the_reference_dev_is_stratified_and_reproducible(tmp_path) -> None:
    from kg_platform.evaluation.pubmedqa.split import split_dev

    dev400 = require_reference("pubmedqa", "pqal_dev400.json")
    fit, held_out = split_dev(dev400, tmp_path / "a", 100)
    assert (fit.name, held_out.name) == (
        "pqal_dev400-fit300-seed0.json",
        "pqal_dev400-heldout100-seed0.json",
    )
    labels = {p: Counter(q.label for q in load_pubmedqa(p)) for p in (fit, held_out)}
    # 232 yes, 120 no, 48 maybe: a quarter of each held out
    assert labels[held_out] == {"yes": 58, "no": 30, "maybe": 12}
    assert labels[fit] == {"yes": 174, "no": 90, "maybe": 36}
    again = split_dev(dev400, tmp_path / "b", 100)
    assert [p.read_bytes() for p in again] == [fit.read_bytes(), held_out.read_bytes()]
    other = split_dev(dev400, tmp_path / "c", 100, seed=1)[1]
    shared = {q.qid for q in load_pubmedqa(other)} & {q.qid for q in load_pubmedqa(held_out)}
    assert len(shared) < 100
    for n in (0, 400):
        with pytest.raises(ValueError, match=f"--held-out {n}: must be at least 1 and fewer "):
            split_dev(dev400, tmp_path / "d", n)


def bad_inputs(folder: Path) -> dict[str, tuple[list[str], str]]:
    pmids = sorted_pmids()
    dev = write_questions(folder / "dev.json", pmids[:10])
    test = write_questions(folder / "test.json", pmids[10:20])
    overlapping = write_questions(folder / "overlap.json", pmids[5:15])
    missing = folder / "absent.json"
    empty = folder / "empty.json"
    empty.write_text("{}")
    garbage = folder / "garbage.json"
    garbage.write_text("no json here")
    return {
        "empty": (["--dev", str(empty), "--test", str(test)], f"--dev {empty}: no questions"),
        "not json": (
            ["--dev", str(garbage), "--test", str(garbage)],
            f"--dev {garbage}: unreadable PubMedQA JSON: Expecting value",
        ),
        "missing": (["--dev", str(dev), "--test", str(missing)], f"--test {missing}: no such"),
        "same": (["--dev", str(dev), "--test", str(dev)], f"--test {dev}: the same questions"),
        "overlap": (
            ["--dev", str(dev), "--test", str(overlapping)],
            f"--test {overlapping}: 5 question ids also in --dev {dev}",
        ),
        "reader": (
            ["--dev", str(dev), "--test", str(test), "--reader", "gpt"],
            "--reader gpt: unknown reader",
        ),
        "recipe": (
            ["--dev", str(dev), "--test", str(test), "--recipe", '{"epoch": 2}'],
            '--recipe {"epoch": 2}: CueRecipe',
        ),
    }


@pytest.mark.parametrize(
    "case", ["missing", "empty", "not json", "same", "overlap", "reader", "recipe"]
)
def test_bad_inputs_get_one_line_naming_them(case, tmp_path, kg_home, capsys) -> None:
    args, message = bad_inputs(tmp_path)[case]
    assert main(["eval", "pubmedqa", *args, "--json"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.count("\n") == 1
    assert captured.err.startswith(f"kg eval pubmedqa: {message}")
    # nothing was registered: no lake written, no instance created
    assert not (kg_home / "dagster").exists()


def test_without_dev_the_reference_dev_file_is_read(tmp_path, kg_home, capsys, monkeypatch) -> None:
    monkeypatch.setenv("KG_REFERENCE_DATA", str(tmp_path / "absent"))
    assert main(["eval", "pubmedqa", "--json"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == (
        f"kg eval pubmedqa: --dev {tmp_path / 'absent' / 'pubmedqa' / 'pqal_dev400.json'}: "
        "no such question file\n"
    )
    assert not (kg_home / "dagster").exists()


def test_kg_build_asks_nothing_of_the_answering_assets() -> None:
    from kg_platform.assets import answering
    from kg_platform.assets.build_keys import BuildKeys

    keys = BuildKeys(["pubmed26n0001"], "pubmed26", "2024", ["pqal_dev400-0babc0cc"], [])
    for asset in answering.defs.assets:
        # registered and run by `kg eval pubmedqa`; kg build's default selection skips them
        assert keys.for_partitions(asset.partitions_def) == []


def tiny_encoder(folder: Path, questions) -> Path:
    """A 2-layer BERT (no head) built from a config, its word-piece vocabulary the words of
    ``questions``: the frozen encoder of the probe reader, small enough for a test."""
    import re

    import torch
    from transformers import BertConfig, BertModel, BertTokenizerFast

    words = {w for q in questions for w in re.findall(r"\w+", f"{q.question} {q.context}".lower())}
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *sorted(words)]
    tokenizer = BertTokenizerFast(vocab={w: i for i, w in enumerate(vocab)}, do_lower_case=True)
    config = BertConfig(
        vocab_size=len(vocab),
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=128,
    )
    torch.manual_seed(0)
    BertModel(config).save_pretrained(str(folder))
    tokenizer.save_pretrained(str(folder))
    return folder


def test_the_probe_reader_runs_through_the_instance(tmp_path) -> None:
    """`--reader probe` on a tiny encoder: the same contract, a probe model trained on DEV
    only, saved under its content hash and read back by `kg ask --reader`'s loader."""
    from kg_platform.answer.readers.base import content_hash
    from kg_platform.answer.readers.loading import load_reader
    from kg_platform.evaluation.common.trained import reader_folder

    pmids = sorted_pmids()
    dev = write_questions(tmp_path / "dev.json", pmids[:30])
    test = write_questions(tmp_path / "test.json", pmids[30:50])
    encoder = tiny_encoder(tmp_path / "encoder", load_pubmedqa(dev))
    home = tmp_path / "kg"
    stdout = io.StringIO()
    recipe = json.dumps({"encoder": str(encoder), "C": 0.1, "pooling": "windows"})
    options = ["--folds", "3", "--shuffled-seeds", "1", "--candidates", "2", "--truncations",
               "1100", "--reader", "probe", "--recipe", recipe]  # fmt: skip
    with pytest.MonkeyPatch.context() as mp:
        use_kg_home(mp, home)
        mp.setenv("DAGSTER_HOME", str(home / "dagster"))
        with contextlib.redirect_stdout(stdout):
            code = main(["eval", "pubmedqa", "--dev", str(dev), "--test", str(test), "--json",
                         *options])  # fmt: skip
    assert code == 0
    summary = json.loads(stdout.getvalue().strip().splitlines()[-1])
    assert summary["test"]["n"] == 20
    assert summary["selected"].startswith("probe|")
    assert summary["partition"]["reader_config"].startswith("probe-")
    # 1 seed x 2 selectable settings x 1 truncation x 3 rules
    assert summary["controls"]["shuffled_label_n"] == 6
    lake = Lake(str(home / "lake"))
    record = read_trained_reader(lake, summary["partition"]["reader_config"])
    assert record["reader"] == "probe" and record["n_train"] == 30
    assert record["training_set_hash"] == training_set_hash(load_pubmedqa(dev))
    assert sorted(record["files"]) == ["probe.json", "reader.json"]
    with reader_folder(lake, record) as folder:
        assert content_hash(folder) == record["model"]
        reader = load_reader(folder)
        out = reader.posteriors("Is it?", ["yes", ""])
    assert reader.name == "probe" and out.shape == (2, 3)
