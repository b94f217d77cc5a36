"""Download and fold into an S3 lake (a real S3 server: moto on 127.0.0.1): the same bytes
and the same corpus as a local lake, and nothing written outside the lake."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from kg_platform.pubmed.fold import fold_checks, fold_release, table_key
from kg_platform.pubmed.parse import parse_file
from kg_platform.pubmed.source import PubmedSource, raw_key
from kg_platform.storage.corpus import corpus_parts
from kg_platform.storage.lake import Lake
from kg_platform_tests.conftest import require_reference
from kg_platform_tests.sources.mirror_server import serve_mirror
from kg_platform_tests.support.source import F1334, F1335, MD5_1334, MD5_1335


def test_fetch_and_fold_on_s3(s3_lake: Lake, tmp_path: Path) -> None:
    mirror = require_reference("pubmed", "mirror")
    with serve_mirror(mirror) as (url, state):
        source = PubmedSource(url)
        results = [source.fetch(f, s3_lake, raw_key(f)) for f in (F1334, F1335)]
        assert [r.md5 for r in results] == [MD5_1334, MD5_1335]
        assert source.fetch(F1334, s3_lake, raw_key(F1334)).skipped
        state.corrupt.add("/baseline/pubmed26n1334.xml.gz")
        s3_lake.remove(raw_key(F1334))
        with pytest.raises(ValueError, match="md5 mismatch"):
            source.fetch(F1334, s3_lake, raw_key(F1334))
        assert not s3_lake.exists(raw_key(F1334))
    assert hashlib.md5(s3_lake.read_bytes(raw_key(F1335))).hexdigest() == MD5_1335

    local = Lake(str(tmp_path / "local"))
    names = []
    for sub_dir, name in (("baseline", "pubmed26n1334"), ("updatefiles", "pubmed26n1335")):
        for table, rows in parse_file(mirror / sub_dir / f"{name}.xml.gz").items():
            s3_lake.write_parquet(table_key(table, name), rows)
            local.write_parquet(table_key(table, name), rows)
        names.append(name)
    on_s3 = fold_release(s3_lake, names)
    on_disk = fold_release(local, names)
    assert on_s3 == on_disk
    assert on_s3.rows["articles"] == 60
    assert [c.passed for c in fold_checks(s3_lake, names, on_s3)] == [True] * 4
    for table in on_s3.rows:
        assert corpus_parts(s3_lake, table) == corpus_parts(local, table)
        for key in corpus_parts(s3_lake, table):
            assert s3_lake.read_parquet(key).equals(local.read_parquet(key)), key
