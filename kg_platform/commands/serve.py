"""`kg serve [--host 127.0.0.1] [--port 8000] [--lake DIR] [--release R] [--mesh-year Y]
[--reader DIR] [--workers N] [--path-budget-ms MS] [--copy-below-mib MIB]
[--read-timeout SECONDS]`: one graph
build warm behind an HTTP JSON API and a question page, in worker processes under a
supervisor that replaces a dead one (with a back-off when deaths repeat)."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

from kg_platform.commands.partition_args import (
    add_partition_args,
    add_path_budget_arg,
    check_path_budget,
)


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "serve", help="serve one graph build over HTTP (JSON API and a question page)"
    )
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=8000, help="port (default 8000)")
    parser.add_argument("--lake", default=None)
    add_partition_args(parser)
    parser.add_argument(
        "--reader",
        default=None,
        metavar="DIR",
        help="a local reader folder that answers what the ladder lets through "
        "(default: KG_READER; none: evidence only)",
    )
    parser.add_argument(
        "--workers",
        type=int,
        default=None,
        help="processes answering questions (default: one per core this process may run "
        "on), under one supervisor; each opens the same build (files over --copy-below-mib "
        "mapped, their pages shared), and POST /reload in any of them makes every one "
        "serve the new build",
    )
    parser.add_argument(
        "--heavy-candidates",
        type=int,
        default=None,
        metavar="N",
        help="search a pair with more than N candidate paths one at a time in each worker, "
        "so the largest questions queue behind each other instead of slowing every other "
        "(default: no such queue; e.g. 1000000 on a 10M-article graph)",
    )
    add_path_budget_arg(parser)
    parser.add_argument(
        "--copy-below-mib",
        type=float,
        default=16.0,
        metavar="MIB",
        help="read each file of the build smaller than this into memory when it is opened, "
        "so damage on disk cannot reach it; larger files are mapped and their sizes checked "
        "before each request (default 16)",
    )
    parser.add_argument(
        "--read-timeout",
        type=float,
        default=10.0,
        metavar="SECONDS",
        help="a request's head, and then its body, must arrive within this (default 10)",
    )
    parser.set_defaults(func=run_serve)


def workers_of(args: argparse.Namespace) -> int:
    """``--workers``, or by default one worker per core this process may run on
    (``settings.usable_cores``: its CPU affinity)."""
    from kg_platform.settings import usable_cores

    return usable_cores() if args.workers is None else args.workers


def run_serve(args: argparse.Namespace) -> int:
    args.workers = workers_of(args)
    if not 0 <= args.port <= 65535:
        raise ValueError(f"--port {args.port}: must be in 0..65535")
    if not 1 <= args.workers <= 64:
        raise ValueError(f"--workers {args.workers}: must be in 1..64")
    if args.copy_below_mib < 0:
        raise ValueError(f"--copy-below-mib {args.copy_below_mib}: must be 0 or more")
    if not 0 < args.read_timeout <= 3600:
        raise ValueError(f"--read-timeout {args.read_timeout}: must be in (0, 3600] seconds")
    if args.heavy_candidates is not None and args.heavy_candidates < 0:
        raise ValueError(f"--heavy-candidates {args.heavy_candidates}: must be 0 or more")
    check_path_budget(args.path_budget_ms)
    from kg_platform.answer.readers.loading import open_reader
    from kg_platform.commands.partition_args import scoped_lake
    from kg_platform.serving.page import corpus_is_synthetic
    from kg_platform.serving.service import GraphService, serve_workers
    from kg_platform.settings import reader_folder

    open_reader(args.reader, reader_folder())  # a bad --reader is refused before any worker starts
    # the build `kg ask` would read, checked here (its sizes against its manifest) before
    # any worker starts; each worker opens it again, warms up, and says when it is ready
    checked = GraphService(lambda: scoped_lake(args, quiet=True), None, kernels=False).current
    print(
        f"kg serve: graph build {checked.build_id} (release {checked.partition['release']}, "
        f"MeSH {checked.partition['mesh_year']}) checked in {checked.open_ms:.0f} ms; "
        f"starting {args.workers} worker(s) on http://{args.host}:{args.port}/ "
        "(each says when it is ready)",
        file=sys.stderr,
        flush=True,
    )
    del checked
    spec = {
        "lake": args.lake,
        "release": args.release,
        "mesh_year": args.mesh_year,
        "reader": args.reader,
        "heavy_candidates": args.heavy_candidates,
        "path_budget_ms": args.path_budget_ms,
        "copy_below": int(args.copy_below_mib * 1024 * 1024),
        "read_timeout": args.read_timeout,
        "synthetic": corpus_is_synthetic(args.lake),
    }
    serve_workers("kg_platform.commands.serve:worker_app", spec, args.workers, args.host, args.port)
    return 0


def worker_app():
    """The application of one worker process of `kg serve` (uvicorn calls it in each
    process it starts), from the spec the parent put in the environment: it opens the
    build, warms up (compiled passes, the first questions) and only then says it is ready
    and takes requests."""
    import faulthandler

    from kg_platform.answer.readers.loading import open_reader
    from kg_platform.commands.partition_args import scoped_lake
    from kg_platform.serving.app import build_app
    from kg_platform.serving.edge import TimedHttp, WorkerRecord
    from kg_platform.serving.service import SPEC_ENV, Generation, GraphService, HeavyLane
    from kg_platform.settings import reader_folder
    from kg_platform.storage import mapped

    faulthandler.enable()  # a worker killed by a signal leaves its stack in the log
    spec = json.loads(os.environ[SPEC_ENV])
    mapped.serve_policy(spec["copy_below"])
    TimedHttp.read_timeout = spec["read_timeout"]
    args = argparse.Namespace(
        lake=spec["lake"], release=spec["release"], mesh_year=spec["mesh_year"]
    )
    started = time.perf_counter()
    service = GraphService(
        lambda: scoped_lake(args, quiet=True),
        open_reader(spec["reader"], reader_folder()),
        Generation(spec["generation"]),
        lane=None if spec["heavy_candidates"] is None else HeavyLane(spec["heavy_candidates"]),
        tolerant=True,
        record=WorkerRecord(spec["record"]),
        path_budget_ms=spec["path_budget_ms"],
    )
    served = service._current
    if served is None:
        line = f"up without a graph build ({service.open_error}); /healthz says why"
    else:
        files = mapped.opened_files()
        line = (
            f"ready in {(time.perf_counter() - started) * 1000.0:.0f} ms: graph build "
            f"{served.build_id} opened in {served.open_ms:.0f} ms "
            f"({sum(f.copied for f in files)} files read into memory, "
            f"{sum(not f.copied for f in files)} mapped), compiled passes "
            f"{served.kernels_ms:.0f} ms, first questions {served.warm_ms:.0f} ms; reader: "
            f"{getattr(service.reader, 'name', None) or 'none loaded'}"
        )
    print(f"kg serve: worker {os.getpid()} {line}", file=sys.stderr, flush=True)
    return build_app(service, spec["read_timeout"], spec["synthetic"])
