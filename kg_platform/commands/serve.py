"""`kg serve [--host 127.0.0.1] [--port 8000] [--lake DIR] [--release R] [--mesh-year Y]
[--reader DIR]`: one graph build warm behind an HTTP JSON API and a question page."""

from __future__ import annotations

import argparse
import sys

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
    parser.set_defaults(func=run_serve)


def run_serve(args: argparse.Namespace) -> int:
    if not 0 <= args.port <= 65535:
        raise ValueError(f"--port {args.port}: must be in 0..65535")
    import uvicorn

    from kg_platform.commands.ask import open_reader
    from kg_platform.commands.partition_args import scoped_lake
    from kg_platform.serving.service import GraphService, build_app

    # the build `kg ask` would read, chosen again on every POST /reload
    service = GraphService(lambda: scoped_lake(args, quiet=True), open_reader(args.reader))
    served = service.current
    print(
        f"kg serve: graph build {served.build_id} (release {served.partition['release']}, "
        f"MeSH {served.partition['mesh_year']}) opened in {served.open_ms:.0f} ms; "
        f"http://{args.host}:{args.port}/",
        file=sys.stderr,
        flush=True,
    )
    uvicorn.run(build_app(service), host=args.host, port=args.port, log_level="warning")
    return 0
