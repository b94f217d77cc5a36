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
