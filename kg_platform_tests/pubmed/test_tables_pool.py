"""The parse workers' initialiser: what a file's parse, checks and write import on first use
is loaded before the first file, so no file's clock pays for it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

from kg_platform_tests.conftest import require_reference

# a fresh interpreter (the modules must not be loaded already): the pool of one is entered
# (it runs the initialiser in this process), then the first file is published; what the
# file imported is printed with its rows
FIRST_FILE = textwrap.dedent(
    """
    import json, shutil, sys
    from kg_platform.pubmed.tables import TablesPool
    from kg_platform.storage.lake import Lake

    lake = Lake(sys.argv[2])
    shutil.copy(sys.argv[1], lake.path("raw/pubmed20n0001.xml.gz"))
    with TablesPool(1) as pool:
        loaded = set(sys.modules)
        published = pool.submit(lake, "raw/pubmed20n0001.xml.gz", "pubmed20n0001").result()
    print(json.dumps({
        "imported_by_the_file": sorted(set(sys.modules) - loaded),
        "rows": published.outcome.rows,
        "published": published.digest is not None,
    }))
    """
)


def test_the_first_file_imports_nothing_after_the_initialiser(tmp_path) -> None:
    source = require_reference("pubmed", "samples/pubmed20/pubmed20n0001.xml.gz")
    (tmp_path / "lake" / "raw").mkdir(parents=True)
    done = subprocess.run(
        [sys.executable, "-c", FIRST_FILE, str(source), str(tmp_path / "lake")],
        capture_output=True,
        text=True,
        check=True,
    )
    result = json.loads(done.stdout.splitlines()[-1])
    assert result == {
        "imported_by_the_file": [],
        "rows": {
            "articles": 10,
            "mesh_edges": 130,
            "citations": 0,
            "corrections": 2,
            "chemicals": 47,
            "pubtypes": 19,
            "deletions": 0,
        },
        "published": True,
    }


# a daemonic billiard process (a Celery prefork child, forked from a parent that preloaded the
# steps' imports) parses two files on a pool of two forks of itself, then a daemonic process
# whose pool worker is up is killed outright: the worker ends with it
IN_A_DAEMON = textwrap.dedent(
    """
    import json, multiprocessing, os, shutil, signal, sys, time
    import billiard
    from kg_platform.pubmed.tables import TablesPool
    from kg_platform.storage.lake import Lake

    def publish(root, queue):
        lake = Lake(root)
        with TablesPool(2) as pool:
            futures = [pool.submit(lake, f"raw/{n}.xml.gz", n) for n in ("a", "b")]
            rows = [f.result().outcome.rows["articles"] for f in futures]
            workers = len(pool._pool._processes)
            method = pool._pool._mp_context.get_start_method()
        queue.put({"daemon": multiprocessing.current_process().daemon, "rows": rows,
                   "pool_processes": workers, "start_method": method})

    def orphaned(root, queue):
        with TablesPool(2) as pool:
            pool.submit(Lake(root), "raw/a.xml.gz", "a").result()
            queue.put(sorted(pool._pool._processes))
            queue.close()
            queue.join_thread()  # the pids are sent before the kill
            os.kill(os.getpid(), signal.SIGKILL)

    if __name__ == "__main__":
        # as a Celery worker's parent does before it forks its children
        import kg_platform.assets.preload
        root = sys.argv[2]
        for name in ("a", "b"):
            shutil.copy(sys.argv[1], os.path.join(root, "raw", f"{name}.xml.gz"))
        fork = multiprocessing.get_context("fork")
        queue = fork.Queue()
        # as Celery's prefork pool starts its children: billiard, daemonic
        child = billiard.Process(target=publish, args=(root, queue), daemon=True)
        child.start()
        result = queue.get(timeout=120)
        child.join()
        child = billiard.Process(target=orphaned, args=(root, queue), daemon=True)
        child.start()
        pids = queue.get(timeout=120)
        child.join()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and any(os.path.exists(f"/proc/{p}") for p in pids):
            time.sleep(0.2)
        result["workers_left_after_kill"] = [p for p in pids if os.path.exists(f"/proc/{p}")]
        print(json.dumps(result))
    """
)


def test_a_daemonic_process_parses_on_its_pool_and_its_workers_end_with_it(tmp_path) -> None:
    source = require_reference("pubmed", "samples/pubmed20/pubmed20n0001.xml.gz")
    (tmp_path / "lake" / "raw").mkdir(parents=True)
    script = tmp_path / "in_a_daemon.py"
    script.write_text(IN_A_DAEMON)
    done = subprocess.run(
        [sys.executable, str(script), str(source), str(tmp_path / "lake")],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "KG_PARSE_WORKERS": "2"},
        timeout=240,
    )
    assert json.loads(done.stdout.splitlines()[-1]) == {
        "daemon": True,
        "rows": [10, 10],
        "pool_processes": 2,
        "start_method": "fork",
        "workers_left_after_kill": [],
    }
