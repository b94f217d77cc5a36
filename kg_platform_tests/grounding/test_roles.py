"""Roles from MeSH structure alone, on the real MeSH 2024 tables and on a small tree."""

from __future__ import annotations

import polars as pl
import pytest

from kg_platform.grounding.roles import RoleConfig, assign_roles


@pytest.fixture(scope="session")
def role_rows(mesh_frames) -> dict[str, tuple[str, str]]:
    frame = assign_roles(mesh_frames["descriptors"], mesh_frames["tree"])
    return {u: (r, why) for u, r, why in frame.select("ui", "role", "reason").iter_rows()}


@pytest.mark.parametrize(
    ("ui", "expected"),
    [
        ("D001241", ("BRIDGE", "specific")),  # Aspirin
        ("D009203", ("BRIDGE", "specific")),  # Myocardial Infarction
        ("D010535", ("BRIDGE", "specific")),  # Laparoscopy
        ("D006801", ("IGNORE", "check_tag")),  # Humans
        ("D002648", ("IGNORE", "age_group")),  # Child
        ("D009273", ("FILTER", "non_topical_category")),  # Age Groups itself
        ("D013997", ("IGNORE", "broad_subtree")),  # Time Factors (G01.910.857)
        ("D013995", ("IGNORE", "broad_subtree")),  # Time (G01.910 itself)
        ("D002908", ("IGNORE", "broad_subtree")),  # Chronic Disease (C23.550.291.500)
        ("D020969", ("IGNORE", "broad_subtree")),  # Disease Attributes itself
        # under Chronic Disease (C23.550.291.500) and a liver disease too (C06): it bridges
        ("D006521", ("BRIDGE", "specific")),  # Hepatitis, Chronic
        ("D009369", ("IGNORE", "top_of_tree")),  # Neoplasms
        ("D005869", ("FILTER", "category")),  # Ghana: a place narrows, never bridges
        ("D007717", ("FILTER", "category")),  # Knee (anatomy)
        ("D012307", ("FILTER", "non_topical_category")),  # Risk Factors (E05 and N05)
    ],
)
def test_roles_of_real_descriptors(role_rows, ui, expected) -> None:
    assert role_rows[ui] == expected


def test_role_counts_on_mesh_2024(role_rows) -> None:
    counts: dict[str, int] = {}
    for role, _ in role_rows.values():
        counts[role] = counts.get(role, 0) + 1
    assert counts == {"BRIDGE": 20700, "FILTER": 9893, "IGNORE": 171}


def _small_tree() -> tuple[pl.DataFrame, pl.DataFrame]:
    tree = pl.DataFrame(
        {
            "ui": ["D1", "D2", "D3", "D4", "D5", "D6", "D7", "D7"],
            "tree_number": [
                "C01.100",
                "C01.100.200",
                "C01.300.400",
                "Z01.100.200",
                "M01",
                "C01",
                "C01.100.300",
                "C02.100.300",
            ],
        }
    )
    descriptors = pl.DataFrame(
        {
            "ui": ["D1", "D2", "D3", "D4", "D5", "D6", "D7"],
            "categories": [["C"], ["C"], ["C"], ["Z"], ["M"], ["C"], ["C"]],
            "min_depth": [2, 3, 3, 3, 1, 1, 3],
        }
    )
    return descriptors, tree


def test_broad_subtrees_include_their_root_and_age_groups_do_not() -> None:
    descriptors, tree = _small_tree()
    config = RoleConfig(ignore_tree_prefixes=("C01.300",), broad_tree_prefixes=("C01.100",))
    frame = assign_roles(descriptors, tree, config)
    assert frame.select("ui", "role", "reason").rows() == [
        ("D1", "IGNORE", "broad_subtree"),  # the broad subtree's root
        ("D2", "IGNORE", "broad_subtree"),
        ("D3", "IGNORE", "age_group"),
        ("D4", "FILTER", "category"),  # Z no longer bridges
        ("D5", "IGNORE", "top_of_tree"),
        ("D6", "IGNORE", "top_of_tree"),
        ("D7", "BRIDGE", "specific"),  # also placed outside the broad subtree
    ]
    # with the defaults, C01.100 is an ordinary disease subtree
    default = assign_roles(descriptors, tree)
    assert default["role"].to_list() == [
        "BRIDGE",
        "BRIDGE",
        "BRIDGE",
        "FILTER",
        "IGNORE",
        "IGNORE",
        "BRIDGE",
    ]


def test_missing_columns_are_named() -> None:
    descriptors, tree = _small_tree()
    with pytest.raises(ValueError, match=r"MeSH tree table: missing columns \['tree_number'\]"):
        assign_roles(descriptors, tree.drop("tree_number"))
