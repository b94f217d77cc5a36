"""`kg`: the headless way into the platform.

Subcommands live in kg_platform/commands/: a module with `add_parser(subparsers)` adds
`kg <name>`, one with `add_eval_parser(subparsers)` adds `kg eval <name>`.
"""

from __future__ import annotations

import argparse
import importlib
import pkgutil
import sys
import time
import warnings

import kg_platform.commands as commands

# when this process imported the CLI: `kg ask` reports the imports up to its start
# (the first command of a process only: a test calling main() again has imported nothing)
_process_started: float | None = time.perf_counter()


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """Every command's parser; with ``only``, just the top-level command of the module of
    that name (``kg ask`` then imports nothing of ``kg build``'s Dagster machinery)."""
    parser = argparse.ArgumentParser(prog="kg", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    if only is not None:
        module = importlib.import_module(f"{commands.__name__}.{only}")
        if hasattr(module, "add_parser"):
            module.add_parser(sub)
            return parser
    eval_parser = sub.add_parser("eval", help="evaluation harnesses")
    eval_sub = eval_parser.add_subparsers(dest="evaluation", required=True)
    for info in sorted(pkgutil.iter_modules(commands.__path__), key=lambda m: m.name):
        module = importlib.import_module(f"{commands.__name__}.{info.name}")
        if hasattr(module, "add_parser"):
            module.add_parser(sub)
        if hasattr(module, "add_eval_parser"):
            module.add_eval_parser(eval_sub)
    return parser


def command_module(given: list[str]) -> str | None:
    """The module of the top-level command ``given`` starts with (each is named as its
    command: kg_platform/commands/build.py adds `kg build`), else None. Only that module is
    imported: a cold `kg ask` spends its time on the question and `kg build` on the build,
    not on importing every other command (the evaluations' modules load numpy, polars and
    the grounding index: ~0.3 s CPU)."""
    import importlib.util

    name = given[0] if given else ""
    if not name.isidentifier() or name == "eval" or name.startswith("_"):
        return None
    return name if importlib.util.find_spec(f"{commands.__name__}.{name}") else None


def main(argv: list[str] | None = None) -> int:
    # Dagster flags preview parameters (backfill_policy) on every import; not the user's concern
    warnings.filterwarnings("ignore", message=r".*is currently in (beta|preview)")
    given = sys.argv[1:] if argv is None else argv
    only = command_module(given)
    global _process_started
    args = build_parser(only).parse_args(argv)
    args.process_started, _process_started = _process_started, None
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
        from kg_platform.settings import home_hint

        print(f"kg {args.command}: {exc}{home_hint(exc)}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
