"""A cold `kg ask` from the shell against the same question asked in a warm process.

On a built lake (default: the one `kg build` recorded, e.g. `make demo`'s), for a few
questions the graph answers (``answer.examples.graph_questions``) and one it refuses:

- ``cold``: `kg ask QUESTION --json --lake LAKE` run as a subprocess ``--runs`` times per
  question: wall seconds (spawn to exit), CPU seconds of that child (``os.wait4``) and its
  own peak RSS (its VmHWM, read by the child at exit: ``ask_cold``, which
  ``benchmarks/rehearsal.py`` uses too), the median of the runs per question and over all
  runs, and the median of the JSON's own ``start_up_ms`` (imports, open, kernels when
  loaded) and ``timings_ms``. The peak counts the pages of the mapped graph arrays and
  grounding index a question touched: ``rss_sampled`` is one more run per question whose
  anonymous (own) and file-backed RSS this process samples;
- ``warm``: the same questions asked in this process on one opened ``KnowledgeGraph``
  after one untimed round (the figure ``benchmarks/ask.py`` reports), and the answers'
  agreement with the cold ones (``same_answers``, timings left out);
- ``index_open``: the load-ready grounding index opened in a fresh process: milliseconds
  and RSS before and after, and after grounding one question.

    KG_HOME=.kg .venv/bin/python benchmarks/cold_ask.py --runs 5 [--reference ../old-checkout]

``--reference CHECKOUT`` runs the same cold command from another checkout in the same run,
interleaved (``reference``: its medians, and this checkout's cold wall over its own).

The machine's load is printed with the figures (``loadavg``): wall time on a shared
machine is inflated by the load, CPU time much less. The last line is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

from kg_platform.answer.api import KnowledgeGraph  # noqa: E402
from kg_platform.answer.examples import graph_questions  # noqa: E402
from kg_platform.commands.partition_args import scoped_lake  # noqa: E402
from kg_platform.grounding.surface_index import INDEX_KEY  # noqa: E402
from kg_platform.settings import Settings  # noqa: E402

REFUSED = "Is the colour of a quiet afternoon louder than its shadow?"
VOLATILE = ("timings_ms", "start_up_ms", "partition")
TARGET_WALL_S, TARGET_RSS_MB = 1.0, 400.0


# `kg ask` in a fresh interpreter that reports its own peak RSS on exit: VmHWM, the high-water
# mark of its own address space (exec starts a new one). wait4's ru_maxrss is no use here: a
# child's starts from the parent's RSS at fork and survives exec, so a parent holding an open
# graph reports its own size for every child.
ASK_WITH_PEAK = """
import atexit, runpy, sys
def peak():
    with open('/proc/self/status') as f:
        kb = next(int(line.split()[1]) for line in f if line.startswith('VmHWM:'))
    sys.stderr.write(f'\\nKG_PEAK_RSS_KB={kb}\\n')
atexit.register(peak)
sys.argv = ['kg', *sys.argv[1:]]
runpy.run_module('kg_platform.cli', run_name='__main__')
"""


def _rss_parts_kb(pid: int) -> tuple[int, int]:
    """(RssAnon, RssFile) of a live process, in KiB; (0, 0) once it is gone."""
    try:
        with open(f"/proc/{pid}/status") as f:
            fields = dict(line.split(":", 1) for line in f)
        return int(fields["RssAnon"].split()[0]), int(fields["RssFile"].split()[0])
    except (FileNotFoundError, ProcessLookupError, KeyError, ValueError):
        return 0, 0


def ask_cold(lake: str, question: str, code: str = REPO, sample_rss: bool = False) -> dict:
    """One `kg ask --json` in a fresh process running the checkout ``code``: wall (spawn to
    exit), CPU (``wait4``: the child's own), its own peak RSS (VmHWM), and its JSON. With
    ``sample_rss`` this process also polls the child's RSS every 2 ms and reports the
    largest anonymous part (its own memory) and file-backed part (pages of mapped files:
    the graph's arrays, the grounding index, libraries) it saw; the polling costs CPU, so
    the timed runs go without it."""
    command = [sys.executable, "-c", ASK_WITH_PEAK, "ask", question, "--json", "--lake", lake]
    # `python -c` imports from its working directory first: run in the checkout measured
    env = {**os.environ, "PYTHONPATH": code}
    anon = mapped = 0
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        started = time.perf_counter()
        child = subprocess.Popen(command, stdout=out, stderr=err, cwd=code, env=env)
        while True:
            pid, status, usage = os.wait4(child.pid, os.WNOHANG if sample_rss else 0)
            if pid:
                break
            now_anon, now_mapped = _rss_parts_kb(child.pid)
            anon, mapped = max(anon, now_anon), max(mapped, now_mapped)
            time.sleep(0.002)
        wall = time.perf_counter() - started
        out.seek(0)
        err.seek(0)
        text, log = out.read(), err.read()
    if os.waitstatus_to_exitcode(status) != 0:
        raise RuntimeError(f"kg ask {question!r}: exit {status}: {log.decode()[-400:]}")
    peak = re.search(rb"KG_PEAK_RSS_KB=([0-9]+)", log)
    if peak is None:
        raise RuntimeError(f"kg ask {question!r}: no peak RSS reported: {log.decode()[-400:]}")
    sampled = {"sampled_anon_mb_max": anon / 1024, "sampled_file_mb_max": mapped / 1024}
    return {
        "wall_s": wall,
        "cpu_s": usage.ru_utime + usage.ru_stime,
        "peak_rss_mb": int(peak.group(1)) / 1024,
        **(sampled if sample_rss else {}),
        "doc": json.loads(text),
    }


INDEX_OPEN = """
import json, sys, time
def rss():
    with open('/proc/self/statm') as f:
        return int(f.read().split()[1]) * 4096 / 2**20
import numpy
from kg_platform.grounding.grounder import Grounder
from kg_platform.grounding.surface_index import SurfaceIndex
before = rss()
started = time.perf_counter()
index = SurfaceIndex.open_file(sys.argv[1])
opened = time.perf_counter()
after = rss()
Grounder(index, index.names).ground(sys.argv[2])
print(json.dumps({"open_ms": round((opened - started) * 1000, 3), "rss_mb_before_open":
    round(before, 1), "rss_mb_after_open": round(after, 1), "rss_mb_after_first_question":
    round(rss(), 1), "surfaces": len(index)}))
"""


def index_open(path: str, question: str, runs: int) -> dict:
    rows = []
    for _ in range(runs):
        done = subprocess.run(
            [sys.executable, "-c", INDEX_OPEN, path, question],
            cwd=REPO,
            capture_output=True,
            text=True,
            check=True,
        )
        rows.append(json.loads(done.stdout))
    return {
        "runs": runs,
        "open_ms_median": statistics.median(r["open_ms"] for r in rows),
        **{k: rows[-1][k] for k in rows[-1] if k != "open_ms"},
        "bytes": os.path.getsize(path),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lake", default=None, help="default: the lake `kg build` recorded")
    parser.add_argument("--runs", type=int, default=5, help="cold runs per question")
    parser.add_argument("--questions", type=int, default=3, help="answered questions")
    parser.add_argument(
        "--reference",
        default=None,
        metavar="CHECKOUT",
        help="also run the same cold command from another checkout (PYTHONPATH=CHECKOUT), "
        "e.g. the commit before the load-ready index, interleaved with this one's runs",
    )
    args = parser.parse_args()
    lake_root = args.lake or Settings.load().lake
    print(json.dumps(measure(lake_root, args.runs, args.questions, args.reference)))
    return 0


def measure(lake_root: str, runs: int, n_questions: int, reference_code: str | None = None) -> dict:
    """The figures above for the published graph build `kg ask --lake lake_root` chooses."""
    lake, build = scoped_lake(
        argparse.Namespace(lake=lake_root, release=None, mesh_year=None), quiet=True
    )
    kg = KnowledgeGraph.open(lake)
    questions = [q.text for q in graph_questions(kg, n_questions).questions] + [REFUSED]

    cold: dict[str, list[dict]] = {q: [] for q in questions}
    reference: list[dict] = []
    for _ in range(runs):  # interleaved: load drifts over the run, not per question
        for q in questions:
            cold[q].append(ask_cold(lake_root, q))
            if reference_code:
                reference.append(ask_cold(lake_root, q, reference_code))

    for q in questions:  # one untimed round, then the timed one
        kg.ask(q)
    warm_ms, same = [], True
    for q in questions:
        started = time.perf_counter()
        answer = kg.ask(q)
        warm_ms.append((time.perf_counter() - started) * 1000.0)
        doc = {**answer.to_json(), "partition": build}
        cold_doc = cold[q][0]["doc"]
        same &= {k: v for k, v in doc.items() if k not in VOLATILE} == {
            k: v for k, v in cold_doc.items() if k not in VOLATILE
        }

    every = [r for rows in cold.values() for r in rows]
    per_question = []
    for q, rows in cold.items():
        per_question.append(
            {
                "question": q,
                "answerable": rows[0]["doc"]["verdict"]["answerable"],
                "wall_s_median": round(statistics.median(r["wall_s"] for r in rows), 3),
                "cpu_s_median": round(statistics.median(r["cpu_s"] for r in rows), 3),
                "peak_rss_mb_median": round(statistics.median(r["peak_rss_mb"] for r in rows), 1),
                "start_up_ms_median": {
                    k: round(statistics.median(r["doc"]["start_up_ms"][k] for r in rows), 1)
                    for k in rows[0]["doc"]["start_up_ms"]
                },
                "query_ms_median": round(
                    statistics.median(sum(r["doc"]["timings_ms"].values()) for r in rows), 1
                ),
            }
        )
    wall = statistics.median(r["wall_s"] for r in every)
    rss = statistics.median(r["peak_rss_mb"] for r in every)
    warm = statistics.median(warm_ms)
    result = {
        "lake": lake_root,
        "graph_build": kg.store.build_id,
        "articles": kg.store.n_articles,
        "loadavg": [round(x, 2) for x in os.getloadavg()],
        "cpus": os.cpu_count(),
        "runs_per_question": runs,
        "cold": {
            "wall_s_median": round(wall, 3),
            "cpu_s_median": round(statistics.median(r["cpu_s"] for r in every), 3),
            "peak_rss_mb_median": round(rss, 1),
            "peak_rss_mb_max": round(max(r["peak_rss_mb"] for r in every), 1),
            # one more run per question, its RSS sampled: own memory against mapped pages
            "rss_sampled": [
                {
                    "question": q[:60],
                    "peak_rss_mb": round(r["peak_rss_mb"], 1),
                    "anon_mb_max": round(r["sampled_anon_mb_max"], 1),
                    "file_mb_max": round(r["sampled_file_mb_max"], 1),
                }
                for q, r in ((q, ask_cold(lake_root, q, sample_rss=True)) for q in questions)
            ],
            "per_question": per_question,
        },
        "warm": {"ask_ms_median": round(warm, 3), "ask_ms": [round(x, 3) for x in warm_ms]},
        "cold_over_warm": round(wall * 1000.0 / warm, 1),
        "reference": {
            "checkout": reference_code,
            "wall_s_median": round(statistics.median(r["wall_s"] for r in reference), 3),
            "cpu_s_median": round(statistics.median(r["cpu_s"] for r in reference), 3),
            "peak_rss_mb_median": round(statistics.median(r["peak_rss_mb"] for r in reference), 1),
            "cold_wall_over_reference": round(
                wall / statistics.median(r["wall_s"] for r in reference), 3
            ),
        }
        if reference
        else None,
        "same_answers": bool(same),
        "wall_within_target": wall <= TARGET_WALL_S,
        "rss_within_target": rss <= TARGET_RSS_MB,
        "index_open": index_open(lake.local_path(INDEX_KEY), questions[0], runs)
        if lake.exists(INDEX_KEY)
        else None,
    }
    return result


if __name__ == "__main__":
    sys.exit(main())
