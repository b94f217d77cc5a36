"""`kg <command>` builds the parser of that command alone: its module, not every command's."""

from __future__ import annotations

import json
import subprocess
import sys

from kg_platform.cli import build_parser, command_module

# a fresh interpreter: what parsing `kg build --files 2` imported
PARSE_BUILD = """
import json, sys
from kg_platform.cli import build_parser, command_module
args = build_parser(command_module(["build", "--files", "2"])).parse_args(["build", "--files", "2"])
print(json.dumps({
    "command": args.command,
    "files": args.files,
    "commands_imported": sorted(m for m in sys.modules if m.startswith("kg_platform.commands.")),
    "evaluation_imported": sorted(m for m in sys.modules if m.startswith("kg_platform.evaluation")),
}))
"""


def test_command_module_is_the_top_level_command_given() -> None:
    assert command_module(["build", "--files", "2"]) == "build"
    assert command_module(["status"]) == "status"
    assert command_module(["eval", "pubmedqa"]) is None
    assert command_module(["--help"]) is None
    assert command_module(["bogus"]) is None
    assert command_module([]) is None
    # a module with no command of its own: the full parser, which refuses it by name
    assert command_module(["partition_args"]) == "partition_args"
    parser = build_parser("partition_args")
    assert parser.parse_args(["status"]).command == "status"


def test_kg_build_parses_without_importing_the_other_commands() -> None:
    done = subprocess.run(
        [sys.executable, "-c", PARSE_BUILD], capture_output=True, text=True, check=True
    )
    assert json.loads(done.stdout) == {
        "command": "build",
        "files": 2,
        "commands_imported": [
            "kg_platform.commands.build",
        ],
        "evaluation_imported": [],
    }
