"""Every guard of the platform is declared in a ``CHECKS`` table (so `grep -rn CHECKS
kg_platform` lists them), with the description and blocking flag the definitions give it."""

from __future__ import annotations

import importlib

import kg_platform.definitions as definitions

CONTRACTS = ("graph", "mesh", "pubmed", "embeddings", "grounding", "evaluation.common")


def test_every_check_spec_is_a_declared_check_and_every_declared_check_a_spec():
    declared = set()
    for package in CONTRACTS:
        module = importlib.import_module(f"kg_platform.{package}.contracts")
        for name, table in vars(module).items():
            if name.endswith("CHECKS"):
                declared |= {(check, *entry) for check, entry in table.items()}
    graph = definitions.defs.resolve_asset_graph()
    specs = [graph.get_check_spec(key) for key in graph.asset_check_keys]
    assert {(s.name, s.description, s.blocking) for s in specs} == declared
    assert [name for name, description, _ in declared if not description] == []
    assert len(specs) == 61
