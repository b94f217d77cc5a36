"""`kg serve [--host 127.0.0.1] [--port 8000] [--lake DIR] [--release R] [--mesh-year Y]
[--reader DIR]`: one graph build warm behind an HTTP JSON API and a question page."""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile

from kg_platform.commands.partition_args import add_partition_args


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
        default=1,
        help="processes answering questions (default 1); each maps the same build, and "
        "POST /reload in any of them makes every one serve the new build",
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
    parser.set_defaults(func=run_serve)


def heavy_lane(heavy_candidates: int | None):
    """A worker's heavy lane for ``--heavy-candidates`` (None: none)."""
    from kg_platform.serving.service import HeavyLane

    if heavy_candidates is None:
        return None
    if heavy_candidates < 0:
        raise ValueError(f"--heavy-candidates {heavy_candidates}: must be 0 or more")
    return HeavyLane(heavy_candidates)


# what a worker process opens: set by `kg serve --workers N` for the processes it starts
SPEC_ENV = "KG_SERVE_SPEC"


def run_serve(args: argparse.Namespace) -> int:
    if not 0 <= args.port <= 65535:
        raise ValueError(f"--port {args.port}: must be in 0..65535")
    if not 1 <= args.workers <= 64:
        raise ValueError(f"--workers {args.workers}: must be in 1..64")
    lane = heavy_lane(args.heavy_candidates)
    import uvicorn

    from kg_platform.commands.ask import open_reader
    from kg_platform.commands.partition_args import scoped_lake
    from kg_platform.serving.service import GraphService, build_app

    # the build `kg ask` would read, chosen again on every POST /reload
    service = GraphService(
        lambda: scoped_lake(args, quiet=True),
        open_reader(args.reader),
        kernels=args.workers == 1,  # with workers, this process only checks the build opens
        lane=lane,
    )
    served = service.current
    print(
        f"kg serve: graph build {served.build_id} (release {served.partition['release']}, "
        f"MeSH {served.partition['mesh_year']}) opened in {served.open_ms:.0f} ms; "
        f"{args.workers} worker(s); http://{args.host}:{args.port}/",
        file=sys.stderr,
        flush=True,
    )
    if args.workers == 1:
        uvicorn.run(build_app(service), host=args.host, port=args.port, log_level="warning")
        return 0
    del service, served  # each worker opens its own (the files' pages are shared)
    with tempfile.TemporaryDirectory(prefix="kg-serve-") as shared:
        spec = {
            "lake": args.lake,
            "release": args.release,
            "mesh_year": args.mesh_year,
            "reader": args.reader,
            "heavy_candidates": args.heavy_candidates,
            "generation": os.path.join(shared, "generation"),
        }
        from kg_platform.serving.service import Generation

        Generation.create(spec["generation"])
        os.environ[SPEC_ENV] = json.dumps(spec)
        uvicorn.run(
            "kg_platform.commands.serve:worker_app",
            factory=True,
            workers=args.workers,
            host=args.host,
            port=args.port,
            log_level="warning",
        )
    return 0


def worker_app():
    """The application of one worker process of `kg serve --workers N` (uvicorn calls it
    in each process it starts), from the spec the parent put in the environment."""
    from kg_platform.commands.ask import open_reader
    from kg_platform.commands.partition_args import scoped_lake
    from kg_platform.serving.service import Generation, GraphService, build_app

    spec = json.loads(os.environ[SPEC_ENV])
    args = argparse.Namespace(
        lake=spec["lake"], release=spec["release"], mesh_year=spec["mesh_year"]
    )
    service = GraphService(
        lambda: scoped_lake(args, quiet=True),
        open_reader(spec["reader"]),
        Generation(spec["generation"]),
        lane=heavy_lane(spec["heavy_candidates"]),
    )
    return build_app(service)
