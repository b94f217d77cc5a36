"""MeshOntology: ancestry as prefix lookups over every tree a descriptor sits in."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from kg_platform.mesh.ontology import MeshOntology
from kg_platform.mesh.tables import write_mesh_tables
from kg_platform.storage.lake import Lake

MYOCARDIAL_INFARCTION = "D009203"


@pytest.fixture(scope="module")
def ontology(reference_build) -> MeshOntology:
    return MeshOntology.from_tables(
        reference_build.tables["descriptors"], reference_build.tables["tree"]
    )


def test_myocardial_infarction_ancestors(ontology):
    assert ontology.name(MYOCARDIAL_INFARCTION) == "Myocardial Infarction"
    assert ontology.tree_numbers_of(MYOCARDIAL_INFARCTION) == [
        "C14.280.647.500",
        "C14.907.585.500",
        "C23.550.513.355.750",
        "C23.550.717.489.750",
    ]
    ancestors = ontology.ancestors(MYOCARDIAL_INFARCTION)
    assert [(ui, ontology.name(ui)) for ui in ancestors] == [
        ("D002318", "Cardiovascular Diseases"),  # C14
        ("D006331", "Heart Diseases"),  # C14.280
        ("D007238", "Infarction"),  # C23.550.513.355, C23.550.717.489
        ("D007511", "Ischemia"),  # C23.550.513
        ("D009336", "Necrosis"),  # C23.550.717
        ("D010335", "Pathologic Processes"),  # C23.550
        ("D013568", "Pathological Conditions, Signs and Symptoms"),  # C23
        ("D014652", "Vascular Diseases"),  # C14.907
        ("D017202", "Myocardial Ischemia"),  # C14.280.647 and C14.907.585
    ]
    assert ontology.tree_numbers_of("D014652") == ["C14.907"]


def test_descendants_match_an_independent_prefix_scan(ontology, reference_frames):
    tree = reference_frames["tree"]
    under_c14 = (
        tree.filter(pl.col("tree_number").str.starts_with("C14."))["ui"].unique().sort().to_list()
    )
    assert len(under_c14) == 466
    assert ontology.descendants("D002318") == under_c14
    assert ontology.descendants(MYOCARDIAL_INFARCTION) == [
        "D000072657",
        "D000072658",
        "D000088442",
        "D012770",
        "D056988",
        "D056989",
    ]
    assert ontology.descendants("D005260") == []  # Female: no tree


def test_is_under(ontology):
    assert ontology.is_under(MYOCARDIAL_INFARCTION, "D002318")
    assert ontology.is_under(MYOCARDIAL_INFARCTION, "D013568")  # through C23 only
    assert ontology.is_under(MYOCARDIAL_INFARCTION, "D014652")  # through C14.907 only
    assert not ontology.is_under("D002318", MYOCARDIAL_INFARCTION)
    assert not ontology.is_under(MYOCARDIAL_INFARCTION, MYOCARDIAL_INFARCTION)
    assert not ontology.is_under("D000001", "D002318")  # Calcimycin is a chemical
    flags = ontology.are_under(np.array([MYOCARDIAL_INFARCTION, "D000001", "D006331"]), "D002318")
    assert flags.tolist() == [True, False, True]
    with pytest.raises(KeyError, match="D999999: not a descriptor"):
        ontology.is_under("D999999", "D002318")
    assert "D999999" not in ontology


def test_from_lake(reference_build, tmp_path):
    lake = Lake(str(tmp_path / "lake"))
    write_mesh_tables(lake, reference_build)
    assert lake.list("mesh", ".parquet") == [
        "mesh/allowable.parquet",
        "mesh/broader.parquet",
        "mesh/descriptors.parquet",
        "mesh/qualifiers.parquet",
        "mesh/scr_aliases.parquet",
        "mesh/terms.parquet",
        "mesh/tree.parquet",
    ]
    from_lake = MeshOntology.from_lake(lake)
    assert from_lake.ancestors(MYOCARDIAL_INFARCTION)[:2] == ["D002318", "D006331"]
    with pytest.raises(FileNotFoundError, match="materialise the mesh_tables asset"):
        MeshOntology.from_lake(Lake(str(tmp_path / "empty")))
