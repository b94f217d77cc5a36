"""A build's phases from what the rehearsal sampled, and the build projected to a larger
release on more cores (benchmarks/rehearsal.py's helper; plain Python, no imports).

Attribution. ``kg build`` runs each step inside its run's worker process (the runs execute
in process), and a step's pool processes are that worker's children. The rehearsal samples
every process of the build every 0.2 s (CPU seconds, RSS, peak RSS) and reads from the
instance each step's window (STEP_START to its end) and its run's worker pid. A step's
figures are those of its run's worker and the worker's descendants inside the window:

- CPU: each process's CPU at the window's end minus at its start, read off its samples by
  linear interpolation (a process counts from 0 CPU at its start; after its last sample
  its CPU stays at that sample's);
- peak RSS: of the largest single process, the largest RSS sampled inside the window, or
  the process's peak RSS (VmHWM) after the window when that peak rose during it (so a
  spike between two samples is not missed, and an earlier step's peak is not counted).

Projection. Per phase, seconds on one core grow on a straight line through two release
sizes, and on ``p`` cores take
``T1 * (f + (1 - f) / p)`` where ``f`` is Amdahl's serial fraction from the speedup
measured on 1 against 2 cores (where a phase's slope would be negative, measurement noise, it
is 0: the larger size's seconds). Phases are summed as if they ran one after another (runs
that overlap make the measured build shorter than that sum). A phase "stops scaling" on
``p`` cores when its speedup there is under ``p / 2`` (half of the cores idle).
"""

from __future__ import annotations

import bisect

MIB = 1 << 20
STOPS_BELOW = 0.5  # parallel efficiency under which a phase is said to stop scaling


# -- attribution --------------------------------------------------------------------------------
def _cpu_at(process: dict, t: float) -> float:
    """A process's CPU seconds at ``t`` from its samples ``(t, cpu, rss, hwm)``."""
    samples = process["samples"]
    if not samples or t <= process["start"]:
        return 0.0
    times = [s[0] for s in samples]
    i = bisect.bisect_left(times, t)
    if i == len(samples):
        return samples[-1][1]
    t1, c1 = samples[i][0], samples[i][1]
    t0, c0 = (process["start"], 0.0) if i == 0 else (samples[i - 1][0], samples[i - 1][1])
    if t1 <= t0:
        return c1
    return c0 + (c1 - c0) * (t - t0) / (t1 - t0)


def _peak_in(process: dict, start: float, end: float) -> int:
    """A process's largest RSS (bytes) inside ``[start, end]``: the samples inside, and its
    VmHWM at the first sample after ``end`` when that rose above the last one before."""
    samples = process["samples"]
    if not samples or process["start"] > end:
        return 0
    inside = [s[2] for s in samples if start <= s[0] <= end]
    before = [s[3] for s in samples if s[0] < start]
    after = [s[3] for s in samples if s[0] > end]
    hwm_before = before[-1] if before else 0
    hwm_after = after[0] if after else samples[-1][3]
    rose = hwm_after if hwm_after > hwm_before else 0
    return max([*inside, rose, 0])


def descendants(processes: dict, root) -> list:
    """``root`` and every process whose parent chain reaches it."""
    inside, changed = {root}, True
    while changed:
        changed = False
        for key, process in processes.items():
            if key not in inside and process.get("parent") in inside:
                inside.add(key)
                changed = True
    return [k for k in processes if k in inside]


def _span(windows: list[tuple[float, float]]) -> float:
    """Seconds covered by the union of the windows."""
    total, end = 0.0, None
    for a, b in sorted(windows):
        if end is None or a > end:
            total += b - a
            end = b
        elif b > end:
            total += b - end
            end = b
    return total


def attribute(windows: list[dict], processes: dict) -> dict:
    """Per phase: its steps, summed step seconds (``wall_s``), seconds during which one of
    its steps ran (``span_s``), CPU seconds and the largest process's peak RSS (MiB).
    ``windows``: ``{"phase", "worker", "start", "end"}`` (worker: a key of ``processes``,
    None when unknown: no CPU or RSS then); ``processes``: key -> ``{"parent", "start",
    "samples": [(t, cpu_s, rss_bytes, hwm_bytes), ...]}``."""
    out: dict[str, dict] = {}
    spans: dict[str, list[tuple[float, float]]] = {}
    for w in windows:
        entry = out.setdefault(
            w["phase"],
            {"steps": 0, "wall_s": 0.0, "span_s": 0.0, "cpu_s": 0.0, "peak_rss_mib": 0},
        )
        entry["steps"] += 1
        entry["wall_s"] += w["end"] - w["start"]
        spans.setdefault(w["phase"], []).append((w["start"], w["end"]))
        if w.get("worker") not in processes:
            entry["unattributed_steps"] = entry.get("unattributed_steps", 0) + 1
            continue
        for key in descendants(processes, w["worker"]):
            p = processes[key]
            entry["cpu_s"] += max(0.0, _cpu_at(p, w["end"]) - _cpu_at(p, w["start"]))
            entry["peak_rss_mib"] = max(
                entry["peak_rss_mib"], round(_peak_in(p, w["start"], w["end"]) / MIB)
            )
    for name, entry in out.items():
        entry["span_s"] = round(_span(spans[name]), 2)
        entry["wall_s"] = round(entry["wall_s"], 2)
        entry["cpu_s"] = round(entry["cpu_s"], 2)
    return out


def with_outside(phases: dict, windows: list[dict], wall_s: float, cpu_s: float) -> dict:
    """``phases`` plus ``outside_steps``: the build's seconds when no step ran (start-up,
    planning, launches, ticks) and its CPU not inside any step (the CLI, the code server,
    each run worker's start-up), as one more phase."""
    inside = _span([(w["start"], w["end"]) for w in windows])
    cpu_inside = sum(p["cpu_s"] for p in phases.values())
    outside = {
        "steps": 0,
        "wall_s": round(max(0.0, wall_s - inside), 2),
        "span_s": round(max(0.0, wall_s - inside), 2),
        "cpu_s": round(max(0.0, cpu_s - cpu_inside), 2),
        "peak_rss_mib": None,
    }
    return {**phases, "outside_steps": outside}


def per_million(phases: dict, records: int) -> dict:
    """CPU seconds per million records, per phase."""
    return {name: round(p["cpu_s"] * 1e6 / records, 2) for name, p in phases.items()}


# -- speedup and projection ---------------------------------------------------------------------
def serial_fraction(speedup: float, cores: int = 2) -> float:
    """Amdahl's serial fraction ``f`` from a speedup ``S`` on ``cores`` against one:
    ``S = 1 / (f + (1 - f) / cores)``, so ``f = (cores / S - 1) / (cores - 1)``, in [0, 1]."""
    f = (cores / speedup - 1) / (cores - 1)
    return min(1.0, max(0.0, f))


def project(points: list[dict], target_records: int, target_cores: list[int]) -> dict:
    """The build at ``target_records`` on each of ``target_cores``, from two measured
    sizes. ``points``: ``{"records", "phases": {name: {"one_core_s", "speedup_2",
    "peak_rss_mib"}}}``; ``one_core_s`` is the phase's span on one core (or its CPU seconds
    where no one-core build ran), ``speedup_2`` its speedup on 2 cores against 1 (None: not
    measured, taken as serial). The serial fraction is the largest size's. Peak RSS is
    projected on the line through the two sizes (slope at least 0, as the seconds')."""
    points = sorted(points, key=lambda p: p["records"])
    small, large = points[0], points[-1]
    if len(points) != 2 or small["records"] == large["records"]:
        sizes = [p["records"] for p in points]
        raise ValueError(f"a projection needs two release sizes, got records {sizes}")
    phases: dict[str, dict] = {}
    totals = {p: 0.0 for p in target_cores}
    total_one = 0.0
    for name, b in large["phases"].items():
        a = small["phases"].get(name, b)
        slope = max(
            0.0, (b["one_core_s"] - a["one_core_s"]) / (large["records"] - small["records"])
        )
        one = b["one_core_s"] + slope * (target_records - large["records"])
        measured = b.get("speedup_2")
        f = 1.0 if measured is None else serial_fraction(measured)
        entry = {
            "one_core_s": round(one, 1),
            "speedup_2_measured": measured,
            "serial_fraction": round(f, 3),
            "ceiling_x": None if f == 0 else round(1 / f, 2),
            "seconds": {},
            "speedup": {},
            "stops_scaling_on": [],
        }
        for p in target_cores:
            t = one * (f + (1 - f) / p)
            entry["seconds"][str(p)] = round(t, 1)
            entry["speedup"][str(p)] = round(one / t, 2) if t > 0 else None
            totals[p] += t
            if t > 0 and one / t < STOPS_BELOW * p:
                entry["stops_scaling_on"].append(p)
        if entry["stops_scaling_on"]:
            entry["why"] = (
                "not measured on 1 core: taken as serial"
                if measured is None
                else f"{measured}x on 2 cores against 1: serial fraction {f:.3f}, "
                + ("no speedup on any cores" if f == 1 else f"at most {1 / f:.1f}x on any cores")
            )
        rss = [p["phases"].get(name, {}).get("peak_rss_mib") for p in (small, large)]
        if None not in rss:
            per = max(0, rss[1] - rss[0]) / (large["records"] - small["records"])
            entry["peak_rss_mib"] = round(rss[1] + per * (target_records - large["records"]))
        phases[name] = entry
        total_one += one
    return {
        "target_records": target_records,
        "from_records": [p["records"] for p in points],
        "model": "one-core seconds on a line through the sizes, times f + (1 - f) / cores "
        "(Amdahl, f from 1 vs 2 cores); phases summed one after another",
        "phases": phases,
        "build_one_core_s": round(total_one, 1),
        "build_s": {str(p): round(t, 1) for p, t in totals.items()},
        "build_speedup": {
            str(p): round(total_one / t, 2) if t > 0 else None for p, t in totals.items()
        },
        "stops_scaling": {
            str(p): [n for n, e in phases.items() if p in e["stops_scaling_on"]]
            for p in target_cores
        },
    }


# -- the rehearsal's phase table, and projection points from it -------------------------------
def table(builds: dict[str, dict], records: int) -> dict:
    """Per phase, its figures in each build (``builds``: cores -> the build's ``phases``):
    span and summed seconds, CPU seconds, per million records, peak RSS, cores used (CPU
    over span: on an idle machine, the speedup a phase gets from those cores; the load
    lowers it); and its speedup on 2 cores against 1 (span on 1 over span on 2) where both
    ran."""
    out: dict[str, dict] = {}
    for cores, phases in builds.items():
        for name, p in phases.items():
            entry = out.setdefault(
                name,
                {"span_s": {}, "wall_s": {}, "cpu_s": {}, "cpu_s_per_million": {}},
            )
            entry.setdefault("peak_rss_mib", {})
            entry["span_s"][cores] = p["span_s"]
            entry["wall_s"][cores] = p["wall_s"]
            entry["cpu_s"][cores] = p["cpu_s"]
            entry["cpu_s_per_million"][cores] = round(p["cpu_s"] * 1e6 / records, 2)
            entry["peak_rss_mib"][cores] = p["peak_rss_mib"]
            entry.setdefault("cores_used", {})[cores] = (
                round(p["cpu_s"] / p["span_s"], 2) if p["span_s"] else None
            )
    for entry in out.values():
        one, two = entry["span_s"].get("1"), entry["span_s"].get("2")
        entry["speedup_2"] = round(one / two, 3) if one and two else None
    return out


def points_from(results: list[dict], cpu: bool = False) -> tuple[list[dict], str]:
    """Projection points from rehearsal results (each with ``records`` and the ``phases``
    of ``table``), and their basis: every phase's span on one core where every result has
    a one-core build (and not ``cpu``), else its CPU seconds (the largest build's) at each
    size: the work on one idle core, without its waits, and the figure the load inflates
    least. A phase's speedup is the largest size's, or the other's where the largest has
    none."""
    one_core = not cpu and all(
        all("1" in p["span_s"] for p in r["phases"].values()) for r in results
    )
    basis = "one_core_span_s" if one_core else "cpu_s"
    points = []
    for r in results:
        phases = {}
        for name, p in r["phases"].items():
            largest = max(p["cpu_s"], key=int)
            rss = [v for v in p["peak_rss_mib"].values() if v is not None]
            phases[name] = {
                "one_core_s": p["span_s"]["1"] if one_core else p["cpu_s"][largest],
                "speedup_2": p.get("speedup_2"),
                "peak_rss_mib": max(rss) if rss else None,
            }
        points.append({"records": r["records"], "phases": phases})
    points.sort(key=lambda p: p["records"])
    for name, phase in points[-1]["phases"].items():
        if phase["speedup_2"] is None:
            known = [p["phases"].get(name, {}).get("speedup_2") for p in points]
            known = [s for s in known if s is not None]
            phase["speedup_2"] = known[-1] if known else None
    return points, basis
