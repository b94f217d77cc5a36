"""`MeshOntology`: ancestry over MeSH tree numbers, as prefix lookups in sorted arrays.

A descriptor can sit in several trees (Myocardial Infarction has four), so ancestry is the
union over all its tree numbers, never a single parent chain. Every lookup is a binary
search (`numpy.searchsorted`) over the sorted tree numbers; nothing walks rows in Python.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import polars as pl
import pyarrow as pa

from kg_platform.storage.lake import Lake

# '/' is the character right after '.', so [t + ".", t + "/") spans every tree number under t
_AFTER_DOT = chr(ord(".") + 1)


@dataclass(frozen=True)
class MeshOntology:
    """Descriptors and their tree numbers, held as sorted numpy string arrays."""

    tree_numbers: np.ndarray  # sorted
    tree_uis: np.ndarray  # descriptor UI of each tree number
    ui_order: np.ndarray  # tree_uis sorted, for "the tree numbers of a UI"
    ui_order_tree: np.ndarray  # index into tree_numbers for each entry of ui_order
    descriptor_uis: np.ndarray  # sorted
    descriptor_names: np.ndarray  # aligned with descriptor_uis

    @classmethod
    def from_tables(
        cls, descriptors: pa.Table | pl.DataFrame, tree: pa.Table | pl.DataFrame
    ) -> MeshOntology:
        descriptor_frame = _as_frame(descriptors, "descriptors", ("ui", "name")).sort("ui")
        tree_frame = _as_frame(tree, "tree", ("ui", "tree_number"))
        tree_numbers = tree_frame.get_column("tree_number").to_numpy().astype(str)
        tree_uis = tree_frame.get_column("ui").to_numpy().astype(str)
        by_number = np.argsort(tree_numbers, kind="stable")
        tree_numbers, tree_uis = tree_numbers[by_number], tree_uis[by_number]
        by_ui = np.argsort(tree_uis, kind="stable")
        uis = descriptor_frame.get_column("ui").to_numpy().astype(str)
        names = descriptor_frame.get_column("name").to_numpy().astype(str)
        by_descriptor = np.argsort(uis, kind="stable")
        return cls(
            tree_numbers=tree_numbers,
            tree_uis=tree_uis,
            ui_order=tree_uis[by_ui],
            ui_order_tree=by_ui,
            descriptor_uis=uis[by_descriptor],
            descriptor_names=names[by_descriptor],
        )

    @classmethod
    def from_lake(cls, lake: Lake) -> MeshOntology:
        """Read `mesh/descriptors.parquet` and `mesh/tree.parquet` from the lake."""
        for key in ("mesh/descriptors.parquet", "mesh/tree.parquet"):
            if not lake.exists(key):
                raise FileNotFoundError(
                    f"{lake.path(key)}: missing; materialise the mesh_tables asset first"
                )
        return cls.from_tables(
            lake.read_parquet("mesh/descriptors.parquet", columns=["ui", "name"]),
            lake.read_parquet("mesh/tree.parquet", columns=["ui", "tree_number"]),
        )

    # -- lookups ---------------------------------------------------------------------------
    def __contains__(self, ui: object) -> bool:
        if not isinstance(ui, str):
            return False
        i = int(np.searchsorted(self.descriptor_uis, ui))
        return i < len(self.descriptor_uis) and self.descriptor_uis[i] == ui

    def name(self, ui: str) -> str:
        i = int(np.searchsorted(self.descriptor_uis, ui))
        if i >= len(self.descriptor_uis) or self.descriptor_uis[i] != ui:
            raise KeyError(f"{ui}: not a descriptor in this MeSH")
        return str(self.descriptor_names[i])

    def tree_numbers_of(self, ui: str) -> list[str]:
        """Every tree number of a descriptor, sorted (empty for Male, Female and the like)."""
        return sorted(self.tree_numbers[self._tree_indices(ui)].tolist())

    def ui_of_tree(self, tree_number: str) -> str:
        i = int(np.searchsorted(self.tree_numbers, tree_number))
        if i >= len(self.tree_numbers) or self.tree_numbers[i] != tree_number:
            raise KeyError(f"{tree_number}: not a tree number in this MeSH")
        return str(self.tree_uis[i])

    def ancestors(self, ui: str) -> list[str]:
        """Every descriptor above `ui` in any of its trees, sorted by UI."""
        prefixes = [
            number[:cut]
            for number in self.tree_numbers[self._tree_indices(ui)].tolist()
            for cut in _dot_positions(number)
        ]
        if not prefixes:
            return []
        wanted = np.asarray(prefixes, dtype=self.tree_numbers.dtype)
        at = np.searchsorted(self.tree_numbers, wanted)
        at = np.minimum(at, len(self.tree_numbers) - 1)
        found = self.tree_uis[at[self.tree_numbers[at] == wanted]]
        return [u for u in np.unique(found).tolist() if u != ui]

    def descendants(self, ui: str) -> list[str]:
        """Every descriptor below `ui` in any of its trees, sorted by UI."""
        numbers = self.tree_numbers[self._tree_indices(ui)]
        if len(numbers) == 0:
            return []
        starts = np.searchsorted(self.tree_numbers, np.char.add(numbers, "."))
        ends = np.searchsorted(self.tree_numbers, np.char.add(numbers, _AFTER_DOT))
        spans = [self.tree_uis[s:e] for s, e in zip(starts.tolist(), ends.tolist(), strict=True)]
        found = np.unique(np.concatenate(spans)) if spans else np.array([], dtype=str)
        return [u for u in found.tolist() if u != ui]

    def is_under(self, ui: str, ancestor_ui: str) -> bool:
        """True when `ancestor_ui` is above `ui` in at least one of `ui`'s trees."""
        self._require(ancestor_ui)
        return ancestor_ui in self.ancestors(ui)

    def are_under(self, uis: Sequence[str] | np.ndarray, ancestor_ui: str) -> np.ndarray:
        """`is_under` for many descriptors at once: a boolean array aligned with `uis`."""
        below = np.asarray(self.descendants(ancestor_ui), dtype=str)
        return np.isin(np.asarray(uis, dtype=str), below)

    # -- internals -------------------------------------------------------------------------
    def _require(self, ui: str) -> None:
        if ui not in self:
            raise KeyError(f"{ui}: not a descriptor in this MeSH")

    def _tree_indices(self, ui: str) -> np.ndarray:
        self._require(ui)
        lo = int(np.searchsorted(self.ui_order, ui, side="left"))
        hi = int(np.searchsorted(self.ui_order, ui, side="right"))
        return self.ui_order_tree[lo:hi]


def _dot_positions(tree_number: str) -> list[int]:
    return [i for i, c in enumerate(tree_number) if c == "."]


def _as_frame(table: pa.Table | pl.DataFrame, what: str, columns: tuple[str, ...]) -> pl.DataFrame:
    frame = table if isinstance(table, pl.DataFrame) else pl.from_arrow(table)
    assert isinstance(frame, pl.DataFrame)
    missing = [c for c in columns if c not in frame.columns]
    if missing:
        raise ValueError(f"MeSH {what} table lacks columns {missing} (has {frame.columns})")
    return frame.select(columns)
