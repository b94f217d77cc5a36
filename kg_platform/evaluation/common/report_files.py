"""The files every evaluation report publishes: report.json, report.md (plots embedded as
``data:image/png;base64`` URIs, which the Dagster UI renders) and the PNGs themselves."""

from __future__ import annotations

import json

from kg_platform.graph.profile import png_data_uri
from kg_platform.storage.lake import Lake


def plot_lines(plots: dict[str, bytes]) -> list[str]:
    """One markdown image line per plot, embedded inline."""
    return [f"![{name}]({png_data_uri(data)})" for name, data in plots.items()]


def write_report_files(
    lake: Lake, prefix: str, doc: dict, markdown: str, plots: dict[str, bytes]
) -> list[str]:
    """report.json, report.md and the PNGs under ``prefix``; returns the keys written."""
    files = {
        "report.json": json.dumps(doc, indent=2, sort_keys=True).encode(),
        "report.md": markdown.encode(),
        **plots,
    }
    for name, data in files.items():
        lake.write_bytes(f"{prefix}/{name}", data)
    return [f"{prefix}/{name}" for name in files]
