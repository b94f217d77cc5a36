"""Read commands read: `kg status`, `kg ask` and `kg search` on a lake that does not exist
create neither it nor the home, and a `--lake` that is a file gets one line naming it."""

from __future__ import annotations

from pathlib import Path

import pytest

from kg_platform.cli import main


@pytest.mark.parametrize(
    "command",
    [["status"], ["ask", "Does aspirin prevent myocardial infarction?"], ["search", "aspirin"]],
)
def test_read_commands_create_no_lake(command, kg_home: Path, tmp_path: Path, capsys) -> None:
    lake = tmp_path / "new" / "lake"
    code = main([*command, "--lake", str(lake)])
    captured = capsys.readouterr()
    assert not lake.exists() and not lake.parent.exists()
    assert not kg_home.exists()
    if command == ["status"]:
        assert code == 0
        assert (
            captured.out
            == f"instance {kg_home / 'dagster'}: none yet (nothing built); lake {lake}\n"
        )
    else:
        assert code == 2
        assert "Traceback" not in captured.err and captured.err.count("\n") == 1
        assert str(lake) in captured.err


@pytest.mark.parametrize("command", [["status"], ["ask", "Does aspirin help?"], ["search", "x"]])
def test_a_lake_that_is_a_file_is_named(command, kg_home: Path, tmp_path: Path, capsys) -> None:
    file = tmp_path / "passwd"
    file.write_text("root:x:0:0\n")
    assert main([*command, "--lake", str(file)]) == 2
    captured = capsys.readouterr()
    name = command[0]
    assert captured.err == f"kg {name}: {file}: not a folder (a local lake root is a folder)\n"
    assert file.read_text() == "root:x:0:0\n"


def test_build_refuses_a_lake_that_is_a_file(kg_home: Path, tmp_path: Path, capsys) -> None:
    file = tmp_path / "passwd"
    file.write_text("root:x:0:0\n")
    assert main(["build", "--lake", str(file), "--pubmed-source", str(tmp_path)]) == 2
    captured = capsys.readouterr()
    assert captured.err == f"kg build: {file}: not a folder (a local lake root is a folder)\n"


def test_status_leaves_the_instance_configuration_as_it_is(
    kg_home: Path, monkeypatch, capsys
) -> None:
    """`kg status` on an instance a build prepared: its dagster.yaml and its pools' slots are
    what they were, even where an operator changed them since (the gpu pool set to 2)."""
    import dagster as dg

    from kg_platform.orchestration.instance import GPU_POOL, NCBI_POOL, prepare_instance
    from kg_platform.settings import Settings

    settings = Settings.load()
    # prepare_instance sets DAGSTER_HOME for the process: set here, so it is put back
    monkeypatch.setenv("DAGSTER_HOME", str(settings.dagster_home))
    with prepare_instance(settings, max_concurrent_runs=3) as instance:
        instance.event_log_storage.set_concurrency_slots(GPU_POOL, 2)
        instance.event_log_storage.set_concurrency_slots(NCBI_POOL, 5)
    yaml_path = settings.dagster_home / "dagster.yaml"
    written = yaml_path.read_bytes()
    assert b"max_concurrent_runs: 3" in written
    (kg_home / "lake").mkdir()
    assert main(["status", "--lake", str(kg_home / "lake")]) == 0
    assert capsys.readouterr().out.startswith(f"instance {settings.dagster_home}; lake ")
    assert yaml_path.read_bytes() == written
    with dg.DagsterInstance.from_config(str(settings.dagster_home)) as instance:
        storage = instance.event_log_storage
        slots = {
            pool: storage.get_concurrency_info(pool).slot_count for pool in (GPU_POOL, NCBI_POOL)
        }
    assert slots == {GPU_POOL: 2, NCBI_POOL: 5}


def test_the_home_is_kg_home_else_the_nearest_kg_else_the_checkouts(
    tmp_path: Path, monkeypatch
) -> None:
    from kg_platform.settings import local

    assert not any((p / ".kg").exists() for p in tmp_path.parents), "a .kg above the tmp folder"
    monkeypatch.delenv("KG_HOME", raising=False)
    checkout, work = tmp_path / "checkout", tmp_path / "work" / "deep"
    work.mkdir(parents=True)
    monkeypatch.setattr(local, "CHECKOUT", checkout)
    monkeypatch.chdir(work)
    # nothing anywhere: .kg here, where a first `kg build` writes
    assert local.kg_home() == work / ".kg"
    # the checkout's .kg (what `make demo` built), from any folder
    (checkout / ".kg").mkdir(parents=True)
    assert local.kg_home() == checkout / ".kg"
    # the nearest .kg in this folder or a parent wins over the checkout's
    (tmp_path / "work" / ".kg").mkdir()
    assert local.kg_home() == tmp_path / "work" / ".kg"
    monkeypatch.setenv("KG_HOME", str(tmp_path / "elsewhere"))
    assert local.kg_home() == tmp_path / "elsewhere"


def test_ask_outside_any_home_says_which_home_and_how_to_choose(
    tmp_path: Path, monkeypatch, capsys
) -> None:
    from kg_platform.settings import local

    assert not any((p / ".kg").exists() for p in tmp_path.parents), "a .kg above the tmp folder"
    for var in ("KG_HOME", "KG_LAKE", "DAGSTER_HOME"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr(local, "CHECKOUT", tmp_path / "checkout")
    monkeypatch.chdir(tmp_path)
    assert main(["ask", "Does aspirin help?"]) == 2
    home = tmp_path / ".kg"
    assert capsys.readouterr().err == (
        f"kg ask: {home}/lake/graph: no published graph for release any, MeSH any (published: "
        "none); materialise `graph` for that partition\n"
        f"  (home {home}: no .kg folder here, above here or in the checkout "
        f"{tmp_path / 'checkout'}; build one with `kg build`, or set KG_HOME to the .kg folder "
        "of a build, e.g. `export KG_HOME=/path/to/kg-platform/.kg`)\n"
    )
    assert not home.exists()


@pytest.mark.parametrize(
    ("command", "ending"),
    [
        ("pubmedqa", "DEV defaults to the reference data's <KG_REFERENCE_DATA>/pubmedqa/"),
        ("verification", "trained on another claim set (`evaluation/scifact/transfer.py`)."),
    ],
)
def test_eval_help_is_whole(command: str, ending: str, capsys) -> None:
    with pytest.raises(SystemExit):
        main(["eval", command, "--help"])
    out = " ".join(capsys.readouterr().out.split())
    description = out.split("options:")[0]
    assert ending in description, description
