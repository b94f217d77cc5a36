"""What an idle `kg build` wait costs in CPU while its code server is up: this process (the
CLI's part: Dagster's gRPC heartbeat thread) and the code server's process tree, per minute,
at each heartbeat interval, alternating in the same run.

The code location is `kg build`'s (orchestration/backfill.py ``workspace``: the platform's
definitions on orchestration/code_server.py) over a fresh SQLite instance under ``--work``.
Nothing runs: what is left is the heartbeats and the server's own threads. Each round sets
the interval (``heartbeat_every``), lets one interval pass, then reads both CPU clocks over
``--seconds``.

    .venv/bin/python benchmarks/code_server_idle.py --intervals 1 5 --seconds 30 --rounds 2
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
TICK = os.sysconf("SC_CLK_TCK")


def tree_cpu_s(root: int) -> float:
    """User and system CPU seconds of ``root`` and its live descendants."""
    children: dict[int, list[int]] = {}
    cpu: dict[int, float] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        pid = int(entry)
        children.setdefault(int(fields[1]), []).append(pid)
        cpu[pid] = (int(fields[11]) + int(fields[12])) / TICK
    total, stack = 0.0, [root]
    while stack:
        pid = stack.pop()
        total += cpu.get(pid, 0.0)
        stack.extend(children.get(pid, []))
    return total


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--intervals", type=float, nargs="+", default=[1.0, 5.0])
    parser.add_argument("--seconds", type=float, default=30.0, help="measured per round")
    parser.add_argument("--rounds", type=int, default=2, help="rounds per interval")
    parser.add_argument("--settle", type=float, default=15.0, help="seconds before the rounds")
    parser.add_argument("--work", default="/tmp/kg-code-server-idle")
    args = parser.parse_args()

    import dagster as dg

    from kg_platform.orchestration.backfill import heartbeat_every, workspace
    from kg_platform.orchestration.instance import write_instance_yaml

    work = Path(args.work)
    shutil.rmtree(work, ignore_errors=True)
    home = work / "dagster"
    home.mkdir(parents=True)
    write_instance_yaml(home, None)
    result: dict = {"benchmark": "code_server_idle", "load_before": os.getloadavg()}
    rounds: dict[str, list[dict]] = {str(i): [] for i in args.intervals}
    with (
        dg.DagsterInstance.from_config(str(home)) as instance,
        workspace(instance, work / "code-server.log") as context,
    ):
        context.create_request_context()  # the server is up and answered
        time.sleep(args.settle)  # its start-up's last work is not counted
        servers = [
            p for p in children_of(os.getpid()) if "code_server" in cmdline(p)
        ] or children_of(os.getpid())
        for _ in range(args.rounds):
            for interval in args.intervals:
                heartbeat_every(interval)
                time.sleep(max(args.intervals) + 0.5)  # the previous interval's wait ends
                own, server = time.process_time(), sum(tree_cpu_s(p) for p in servers)
                time.sleep(args.seconds)
                own = time.process_time() - own
                server = sum(tree_cpu_s(p) for p in servers) - server
                per_min = 60.0 / args.seconds
                got = {
                    "cli_cpu_s_per_min": round(own * per_min, 3),
                    "code_server_cpu_s_per_min": round(server * per_min, 3),
                }
                rounds[str(interval)].append(got)
                print(json.dumps({"interval_s": interval, **got}), flush=True)
    result["by_interval_s"] = {
        i: {k: min(r[k] for r in rs) for k in rs[0]} | {"rounds": rs} for i, rs in rounds.items()
    }
    result["load_after"] = os.getloadavg()
    shutil.rmtree(work, ignore_errors=True)
    print(json.dumps(result))
    return 0


def children_of(pid: int) -> list[int]:
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    if int(f.read().rsplit(")", 1)[1].split()[1]) == pid:
                        out.append(int(entry))
            except OSError:
                continue
    return out


def cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


if __name__ == "__main__":
    raise SystemExit(main())
