"""`kg`: the headless way into the platform.

Subcommands live in kg_platform/commands/: a module with `add_parser(subparsers)` adds
`kg <name>`, one with `add_eval_parser(subparsers)` adds `kg eval <name>`.
"""

from __future__ import annotations

import argparse
import importlib
import pkgutil
import sys
import warnings

import kg_platform.commands as commands


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="kg", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    eval_parser = sub.add_parser("eval", help="evaluation harnesses")
    eval_sub = eval_parser.add_subparsers(dest="evaluation", required=True)
    for info in sorted(pkgutil.iter_modules(commands.__path__), key=lambda m: m.name):
        module = importlib.import_module(f"{commands.__name__}.{info.name}")
        if hasattr(module, "add_parser"):
            module.add_parser(sub)
        if hasattr(module, "add_eval_parser"):
            module.add_eval_parser(eval_sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    # Dagster flags preview parameters (backfill_policy) on every import; not the user's concern
    warnings.filterwarnings("ignore", message=r".*is currently in (beta|preview)")
    args = build_parser().parse_args(argv)
    if getattr(args, "lake", "") is None:
        # the lake the last `kg build` recorded (or KG_LAKE, or .kg/lake)
        from kg_platform.settings import Settings

        args.lake = Settings.load().lake
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        print("kg: interrupted", file=sys.stderr)
        return 130
    except (ValueError, FileNotFoundError, PermissionError) as exc:
        # domain errors already name the input; a traceback adds nothing for the user
        print(f"kg {args.command}: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
