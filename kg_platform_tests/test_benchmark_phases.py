"""The rehearsal's phases and projection (``benchmarks/_phases.py``): a step's CPU and peak
RSS read off sampled processes by its window, Amdahl's serial fraction, and the projection
of two release sizes to a larger one on more cores, on fixed inputs (exact values); and
``benchmarks/rehearsal.py --project`` over two results written as the rehearsal writes them."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks import _phases

MIB = 1 << 20
REPO = Path(__file__).resolve().parents[1]


def test_serial_fraction_from_a_speedup_on_two_cores() -> None:
    assert _phases.serial_fraction(2.0) == 0.0
    assert _phases.serial_fraction(1.0) == 1.0
    assert _phases.serial_fraction(1.6) == 0.25
    assert _phases.serial_fraction(2.5) == 0.0  # superlinear: no serial part
    assert _phases.serial_fraction(0.8) == 1.0  # slower on two: taken as wholly serial


def test_steps_are_measured_by_their_window_in_their_run_worker_and_its_children() -> None:
    worker, child, other = ("w", 0.0), ("c", 1.5), ("o", 0.0)
    processes = {
        # (time, CPU s, RSS, peak RSS)
        worker: {
            "parent": None,
            "start": 0.0,
            "samples": [
                (1.0, 1.0, 100 * MIB, 100 * MIB),
                (2.0, 2.0, 300 * MIB, 300 * MIB),
                (3.0, 2.5, 200 * MIB, 300 * MIB),
                (4.0, 3.5, 200 * MIB, 300 * MIB),
            ],
        },
        # a pool process whose peak (500 MiB) came between its start and its first sample
        child: {
            "parent": worker,
            "start": 1.5,
            "samples": [(2.0, 0.5, 50 * MIB, 500 * MIB), (3.0, 1.5, 50 * MIB, 500 * MIB)],
        },
        other: {"parent": None, "start": 0.0, "samples": [(2.0, 9.0, 900 * MIB, 900 * MIB)]},
    }
    windows = [
        {"phase": "a", "worker": worker, "start": 1.5, "end": 2.5},
        {"phase": "b", "worker": worker, "start": 3.0, "end": 4.0},
        {"phase": "b", "worker": None, "start": 3.5, "end": 4.5},
    ]
    phases = _phases.attribute(windows, processes)
    assert phases == {
        # worker 2.25 - 1.5, child 1.0 - 0; the child's peak rose inside the window
        "a": {"steps": 1, "wall_s": 1.0, "span_s": 1.0, "cpu_s": 1.75, "peak_rss_mib": 500},
        # worker 3.5 - 2.5, child ended at 1.5; peaks reached before the window do not count
        "b": {
            "steps": 2,
            "wall_s": 2.0,
            "span_s": 1.5,
            "cpu_s": 1.0,
            "peak_rss_mib": 200,
            "unattributed_steps": 1,
        },
    }
    whole = _phases.with_outside(phases, windows, wall_s=10.0, cpu_s=5.0)
    assert whole["outside_steps"] == {
        "steps": 0,
        "wall_s": 7.5,
        "span_s": 7.5,
        "cpu_s": 2.25,
        "peak_rss_mib": None,
    }
    assert _phases.per_million(whole, 500_000) == {"a": 3.5, "b": 2.0, "outside_steps": 4.5}


def _point(records: int, parse: float, graph: float, graph_rss: int) -> dict:
    return {
        "records": records,
        "phases": {
            "parse": {"one_core_s": parse, "speedup_2": 2.0, "peak_rss_mib": 300},
            "graph": {"one_core_s": graph, "speedup_2": 1.6, "peak_rss_mib": graph_rss},
            "outside_steps": {"one_core_s": 30.0, "speedup_2": 1.0, "peak_rss_mib": None},
        },
    }


def test_projection_from_two_sizes_says_which_phases_stop_scaling() -> None:
    points = [_point(4_000_000, 40.0, 80.0, 2500), _point(1_000_000, 10.0, 20.0, 1000)]
    got = _phases.project(points, 40_000_000, [2, 26])
    assert got["from_records"] == [1_000_000, 4_000_000]
    assert got["phases"]["parse"] == {
        "one_core_s": 400.0,
        "speedup_2_measured": 2.0,
        "serial_fraction": 0.0,
        "ceiling_x": None,
        "seconds": {"2": 200.0, "26": 15.4},
        "speedup": {"2": 2.0, "26": 26.0},
        "stops_scaling_on": [],
        "peak_rss_mib": 300,
    }
    assert got["phases"]["graph"] == {
        "one_core_s": 800.0,
        "speedup_2_measured": 1.6,
        "serial_fraction": 0.25,
        "ceiling_x": 4.0,
        "seconds": {"2": 500.0, "26": 223.1},
        "speedup": {"2": 1.6, "26": 3.59},
        "stops_scaling_on": [26],
        "why": "1.6x on 2 cores against 1: serial fraction 0.250, at most 4.0x on any cores",
        "peak_rss_mib": 20500,
    }
    assert got["phases"]["outside_steps"]["seconds"] == {"2": 30.0, "26": 30.0}
    assert got["phases"]["outside_steps"]["why"] == (
        "1.0x on 2 cores against 1: serial fraction 1.000, no speedup on any cores"
    )
    assert got["build_one_core_s"] == 1230.0
    assert got["build_s"] == {"2": 730.0, "26": 268.5}
    assert got["build_speedup"] == {"2": 1.68, "26": 4.58}
    assert got["stops_scaling"] == {"2": [], "26": ["graph", "outside_steps"]}
    with pytest.raises(ValueError, match=r"two release sizes, got records \[1000000\]"):
        _phases.project(points[1:], 40_000_000, [2])


def _result(records: int, span_1: float | None, span_2: float, cpu: float, rss: int) -> dict:
    """A rehearsal result's phase table (``_phases.table``) with one phase."""
    builds = {"2": {"parse": {"span_s": span_2, "wall_s": span_2, "cpu_s": cpu}}}
    if span_1 is not None:
        builds["1"] = {"parse": {"span_s": span_1, "wall_s": span_1, "cpu_s": cpu}}
    for phases in builds.values():
        phases["parse"]["peak_rss_mib"] = rss
    return {"benchmark": "rehearsal", "records": records, "phases": _phases.table(builds, records)}


def test_rehearsal_projects_two_results(tmp_path: Path) -> None:
    small, large = tmp_path / "small.log", tmp_path / "large.log"
    small.write_text('{"phase": "build"}\n' + json.dumps(_result(1_000_000, 12.0, 8.0, 11.0, 250)))
    large.write_text(json.dumps(_result(4_000_000, 42.0, 24.0, 41.0, 400)) + "\n")
    assert _result(1_000_000, 12.0, 8.0, 11.0, 250)["phases"]["parse"] == {
        "span_s": {"2": 8.0, "1": 12.0},
        "wall_s": {"2": 8.0, "1": 12.0},
        "cpu_s": {"2": 11.0, "1": 11.0},
        "cpu_s_per_million": {"2": 11.0, "1": 11.0},
        "peak_rss_mib": {"2": 250, "1": 250},
        "cores_used": {"2": 1.38, "1": 0.92},
        "speedup_2": 1.5,
    }
    done = subprocess.run(
        [sys.executable, "benchmarks/rehearsal.py", "--project", str(small), str(large)],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    )
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert got["basis"] == "one_core_span_s"
    parse = got["phases"]["parse"]
    # 42 s + 30 s per 3M records; 1.75x on 2 cores: f = 1/7
    assert parse["one_core_s"] == 402.0
    assert parse["serial_fraction"] == 0.143
    assert parse["seconds"] == {"2": 229.7, "26": 70.7}
    assert parse["stops_scaling_on"] == [26]
    assert parse["peak_rss_mib"] == 2200
    # --basis cpu: CPU seconds at both sizes even where one-core spans exist
    points, basis = _phases.points_from([json.loads(large.read_text())], cpu=True)
    assert (basis, points[0]["phases"]["parse"]["one_core_s"]) == ("cpu_s", 41.0)
    # without a one-core build at the larger size: CPU seconds at both, the smaller's speedup
    points, basis = _phases.points_from(
        [_result(1_000_000, 12.0, 8.0, 11.0, 250), _result(4_000_000, None, 24.0, 41.0, 400)]
    )
    assert basis == "cpu_s"
    assert [p["phases"]["parse"] for p in points] == [
        {"one_core_s": 11.0, "speedup_2": 1.5, "peak_rss_mib": 250},
        {"one_core_s": 41.0, "speedup_2": 1.5, "peak_rss_mib": 400},
    ]
