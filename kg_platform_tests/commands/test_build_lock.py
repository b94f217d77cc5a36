"""One writer per instance: two `kg build` processes on one home, started together; a lock
file left by a killed build; `--wait`; the `.kg/` files written atomically under the lock."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import dagster as dg

from kg_platform.orchestration.lock import LOCK_FILE, BuildLockHeld, build_lock, read_holder
from kg_platform_tests.conftest import require_reference
from kg_platform_tests.support.build import BUILD_TIMEOUT_S, SELECT, kg_env

LOCK_LINE = re.compile(
    r"^kg build: another kg build is running on this instance \(pid (\d+), started at "
    r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC; lock (\S+)\); wait for it, or add --wait$"
)


def kg_build_process(home: Path, *extra: str) -> subprocess.Popen:
    args = [sys.executable, "-m", "kg_platform.cli", "build"]
    args += ["--pubmed-source", str(require_reference("pubmed", "mirror"))]
    args += ["--mesh-source", str(require_reference("mesh")), "--select", SELECT, "--jobs", "2"]
    return subprocess.Popen(
        [*args, *extra],
        env=kg_env(home),
        cwd=home.parent,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_two_builds_started_together_one_runs_the_other_says_who(tmp_path: Path) -> None:
    home = tmp_path / "kg"
    first, second = kg_build_process(home), kg_build_process(home)
    outcomes = [(p, *p.communicate(timeout=BUILD_TIMEOUT_S)) for p in (first, second)]
    ran = [(p, out, err) for p, out, err in outcomes if p.returncode == 0]
    refused = [(p, out, err) for p, out, err in outcomes if p.returncode != 0]
    assert len(ran) == 1 and len(refused) == 1, outcomes
    (winner, out, _), (loser, loser_out, loser_err) = ran[0], refused[0]
    assert loser.returncode == 2
    # the summary counts the winner's runs as the instance records them (one backfill, the
    # runs its policy made, all succeeded)
    instance = dg.DagsterInstance.from_config(str(home / "dagster"))
    [backfill] = instance.get_backfills()
    runs = instance.get_runs(dg.RunsFilter(tags={"dagster/backfill": backfill.backfill_id}))
    assert runs and {r.status.value for r in runs} == {"SUCCESS"}
    assert f"runs: {len(runs)} succeeded, 0 failed; checks: 12 passed, 0 failed" in out
    assert loser_out == ""
    # one line naming the build that runs: its pid and start, and the lock file
    lines = loser_err.splitlines()
    assert len(lines) == 1 and "Traceback" not in loser_err, loser_err
    match = LOCK_LINE.match(lines[0])
    assert match is not None, lines[0]
    assert int(match.group(1)) == winner.pid
    assert match.group(2) == str(home / "dagster" / LOCK_FILE)
    # no temporary file is left beside the .kg/ files written under the lock
    assert [p.name for p in home.iterdir() if ".tmp" in p.name] == []
    assert json.loads((home / "sources.json").read_text())["lake"] == str(home / "lake")
    assert [p.name for p in (home / "dagster").iterdir() if ".tmp" in p.name] == []

    # in sequence both succeed: the lock went with the first build's process
    again = kg_build_process(home)
    out, err = again.communicate(timeout=BUILD_TIMEOUT_S)
    assert again.returncode == 0, err
    assert "0 of 5 asset partitions to materialise; the rest are fresh" in out


def lock_holder(tmp_path: Path, home: Path) -> subprocess.Popen:
    """A process that holds the build lock of ``home`` until a line comes on its stdin."""
    script = (
        "import sys\nfrom pathlib import Path\n"
        "from kg_platform.orchestration.lock import build_lock\n"
        "with build_lock(Path(sys.argv[1])):\n    print('held', flush=True)\n    sys.stdin.readline()\n"
    )
    holder = subprocess.Popen(
        [sys.executable, "-c", script, str(home)],
        env=kg_env(tmp_path),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert holder.stdout.readline() == "held\n"
    return holder


def test_a_lock_file_of_a_killed_build_is_taken_over(tmp_path: Path) -> None:
    home = tmp_path / "dagster"
    # a process that takes the lock and is killed outright: its file stays, naming it
    holder = lock_holder(tmp_path, home)
    named = read_holder(home / LOCK_FILE)
    assert named is not None and named.pid == holder.pid and named.alive()
    try:
        with build_lock(home):
            raise AssertionError("a live holder's lock was taken")
    except BuildLockHeld as refused:
        assert refused.holder == named
    holder.kill()
    holder.wait(timeout=30)
    assert not named.alive()
    assert read_holder(home / LOCK_FILE) == named  # the stale file still names it
    with build_lock(home) as me:
        assert me.pid == os.getpid()
        assert read_holder(home / LOCK_FILE) == me


def test_wait_waits_for_the_holder(tmp_path: Path) -> None:
    home = tmp_path / "dagster"
    holder = lock_holder(tmp_path, home)
    said: list[str] = []

    def on_wait(line: str) -> None:
        said.append(line)
        holder.stdin.write("done\n")  # the holder lets go only once we wait
        holder.stdin.flush()

    with build_lock(home, wait=True, on_wait=on_wait) as me:
        assert me.pid == os.getpid()
    assert holder.wait(timeout=30) == 0
    assert len(said) == 1 and said[0].startswith(
        f"waiting for the kg build running on this instance (pid {holder.pid}, started at "
    )
    started = time.gmtime(read_holder(home / LOCK_FILE).started_at)
    assert started.tm_year >= 2024


def lake_holder(tmp_path: Path, lake: Path, home: Path) -> subprocess.Popen:
    """A process that writes ``lake`` for ``home`` until a line comes on its stdin."""
    script = (
        "import sys\nfrom pathlib import Path\n"
        "from kg_platform.orchestration.lock import lake_writer\n"
        "with lake_writer(sys.argv[1], Path(sys.argv[2])):\n"
        "    print('held', flush=True)\n    sys.stdin.readline()\n"
    )
    holder = subprocess.Popen(
        [sys.executable, "-c", script, str(lake), str(home)],
        env=kg_env(tmp_path),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert holder.stdout.readline() == "held\n"
    return holder


def test_two_homes_on_one_lake_refuse_each_other(tmp_path: Path, monkeypatch, capsys) -> None:
    """A build of another home writes the lake: `kg build` of this home says which home,
    process and machine, exits 2 and writes nothing; once that writer is gone (killed, its
    record left behind) the lake is taken over, and a build that ends leaves no record."""
    from kg_platform.cli import main
    from kg_platform.orchestration.lock import WRITER_FILE, LakeHeld, lake_writer, read_writer
    from kg_platform.storage.lake import Lake
    from kg_platform.storage.owner import host_name
    from kg_platform_tests.conftest import use_kg_home

    lake = tmp_path / "shared-lake"
    other = tmp_path / "other" / "dagster"
    holder = lake_holder(tmp_path, lake, other)
    writer = read_writer(Lake(str(lake)))
    assert (writer.home, writer.pid, writer.host) == (str(other), holder.pid, host_name())
    home = use_kg_home(monkeypatch, tmp_path / "kg")
    mirror = require_reference("pubmed", "mirror")
    command = ["build", "--lake", str(lake), "--pubmed-source", str(mirror)]
    command += ["--mesh-source", str(require_reference("mesh")), "--select", SELECT]
    assert main(command) == 2
    captured = capsys.readouterr()
    assert captured.err == (
        f"kg build: lake {lake} is being written by a kg build of another home "
        f"({writer.describe()}); one lake has one writer: wait for it, or build into "
        "another --lake\n"
    )
    assert sorted(p.name for p in lake.iterdir()) == [WRITER_FILE]
    assert not (home / "dagster").exists()

    holder.kill()
    holder.wait(timeout=30)
    assert read_writer(Lake(str(lake))) == writer  # the killed writer's record stays
    with lake_writer(str(lake), home / "dagster") as me:
        assert read_writer(Lake(str(lake))) == me
        try:
            with lake_writer(str(lake), other):
                raise AssertionError("a live writer's lake was taken")
        except LakeHeld as refused:
            assert refused.writer == me
    assert not (lake / WRITER_FILE).exists()
