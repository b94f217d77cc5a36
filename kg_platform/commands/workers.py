"""`kg workers start|stop|status`: a Redis broker, Postgres instance storage and N Celery
workers on this machine, so the same definitions run on dagster-celery's executor."""

from __future__ import annotations

import argparse

from kg_platform.settings import Settings


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser(
        "workers", help="local Celery workers, Redis broker and Postgres instance storage"
    )
    sub = parser.add_subparsers(dest="action", required=True)
    start = sub.add_parser("start", help="start Redis, Postgres and the workers")
    start.add_argument("--workers", type=int, default=2, help="worker processes (default 2)")
    start.add_argument(
        "--queues",
        action="append",
        default=[],
        metavar="Q1,Q2",
        help="queues of one worker, comma-separated; repeat for the next workers (cycled); "
        "default dagster,parse for every worker, plus gpu where torch sees a GPU",
    )
    start.add_argument(
        "--concurrency", type=int, default=1, help="steps at once per worker (default 1)"
    )
    start.add_argument("--redis-port", type=int, default=0, help="default: a free port")
    start.add_argument("--postgres-port", type=int, default=0, help="default: a free port")
    start.set_defaults(func=run_start)
    stop = sub.add_parser("stop", help="stop the workers, Postgres and Redis")
    stop.add_argument(
        "--timeout", type=float, default=30, help="seconds a worker may finish its step"
    )
    stop.set_defaults(func=run_stop)
    status = sub.add_parser("status", help="what runs: pids, ports, queues")
    status.set_defaults(func=run_status)


def run_start(args: argparse.Namespace) -> int:
    from kg_platform.orchestration import deployment as local
    from kg_platform.orchestration.services import ServiceError

    settings = Settings.load()
    queue_lists = [[q.strip() for q in spec.split(",") if q.strip()] for spec in args.queues]
    try:
        started = local.start(
            settings.home,
            settings.dagster_home,
            n_workers=args.workers,
            queue_lists=queue_lists,
            concurrency=args.concurrency,
            redis_port=args.redis_port,
            postgres_port=args.postgres_port,
        )
    except ServiceError as exc:
        print(f"kg workers start: {exc}")
        return 1
    print_deployment(started, settings)
    return 0


def run_stop(args: argparse.Namespace) -> int:
    from kg_platform.orchestration import deployment as local

    settings = Settings.load()
    stopped, killed = local.stop(settings.home, settings.dagster_home, args.timeout)
    if stopped is None:
        print(f"no workers recorded under {settings.home / 'workers'}")
        return 0
    for process in stopped.processes:
        how = "killed" if process.name in killed else "stopped"
        print(f"{process.name:<28} pid {process.pid:<8} {how}")
    print(f"instance {settings.dagster_home / 'dagster.yaml'}: back on its default storage")
    return 0


def run_status(args: argparse.Namespace) -> int:
    from kg_platform.orchestration.deployment import health
    from kg_platform.settings.workers import load_deployment

    settings = Settings.load()
    deployment = load_deployment(settings.home)
    if deployment is None:
        print(f"no workers running under {settings.home / 'workers'} (kg workers start)")
        return 1
    print_deployment(deployment, settings)
    return 0 if all(h.running for h in health(deployment)) else 1


def print_deployment(deployment, settings: Settings) -> None:
    from kg_platform.orchestration.deployment import health

    for h in health(deployment):
        p = h.process
        where = f"port {p.port}" if p.port else f"queues {','.join(p.queues)}"
        state = "running" if h.running else "NOT RUNNING"
        print(f"{p.name:<28} pid {p.pid:<8} {where:<24} {state:<12} log {p.log}")
    print(f"broker   {deployment.broker_url} (results {deployment.backend_url})")
    print(f"instance {settings.dagster_home / 'dagster.yaml'} -> {deployment.postgres_url}")
    print("executor celery for kg build, dagster dev and the daemon (KG_EXECUTOR overrides)")
