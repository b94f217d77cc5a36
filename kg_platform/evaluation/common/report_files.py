"""The files every evaluation report publishes: report.json, report.md (plots embedded as
``data:image/png;base64`` URIs, which the Dagster UI renders) and the PNGs themselves."""

from __future__ import annotations

import json
from collections.abc import Sequence

import numpy as np

from kg_platform.graph.profile import png_data_uri
from kg_platform.storage.lake import Lake


def percent(value: float | None) -> str:
    """A share as a percentage with one decimal (``0.4567`` -> ``45.7%``); n/a for None."""
    return "n/a" if value is None else f"{100 * value:.1f}%"


def draw_confusion(axis, confusion: Sequence[Sequence[int]], labels: Sequence[str]) -> None:
    """A confusion matrix (rows gold, columns predicted) on a matplotlib axis: a heat map
    with each cell's count."""
    matrix = np.asarray(confusion)
    axis.imshow(matrix, cmap="Blues")
    for (i, j), value in np.ndenumerate(matrix):
        axis.text(j, i, str(value), ha="center", va="center")
    axis.set_xticks(range(len(labels)), labels)
    axis.set_yticks(range(len(labels)), labels)
    axis.set_xlabel("predicted")
    axis.set_ylabel("gold")


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
