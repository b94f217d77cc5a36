"""The Celery worker's preload: every stage the definitions merge, and no settings read."""

from __future__ import annotations

import json
import subprocess
import sys

PROBE = """
import json, sys
import kg_platform.orchestration.preload
preloaded = {
    id(module.defs): name
    for name, module in list(sys.modules.items())
    if name.startswith("kg_platform.assets.") and hasattr(module, "defs")
}
settings_read = "kg_platform.definitions" in sys.modules
import kg_platform.definitions
print(json.dumps({
    "stages": len(kg_platform.definitions.STAGES),
    "not_preloaded": [i for i, s in enumerate(kg_platform.definitions.STAGES) if id(s) not in preloaded],
    "settings_read": settings_read,
}))
"""


def test_the_worker_preloads_every_stage_of_the_definitions(tmp_path):
    done = subprocess.run(
        [sys.executable, "-c", PROBE], capture_output=True, text=True, cwd=tmp_path, timeout=300
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report == {"stages": 9, "not_preloaded": [], "settings_read": False}
