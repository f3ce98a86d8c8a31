from __future__ import annotations

import os

import pytest

from specmodel.errors import SpecmodelError
from specmodel.io import atomic_write_json, atomic_write_text, read_json


def test_atomic_write_replaces_and_uses_umask_permissions(tmp_path):
    old = os.umask(0o022)
    try:
        p = atomic_write_text(tmp_path / "a" / "x.txt", "one")
        assert p.read_text() == "one"
        atomic_write_text(p, "two")
        assert p.read_text() == "two"
        assert (p.stat().st_mode & 0o777) == 0o644
        assert sorted(f.name for f in p.parent.iterdir()) == ["x.txt"]
    finally:
        os.umask(old)


def test_failed_json_write_keeps_old_file(tmp_path):
    p = atomic_write_json(tmp_path / "r.json", {"a": 1})
    with pytest.raises(ValueError):
        atomic_write_json(p, {"a": float("nan")})
    assert read_json(p) == {"a": 1}
    assert [f.name for f in tmp_path.iterdir()] == ["r.json"]


def test_read_json_errors(tmp_path):
    (tmp_path / "t.json.gz").write_bytes(b"\x1f\x8b\x08\x00garbage")
    with pytest.raises(SpecmodelError, match="t.json.gz: cannot read"):
        read_json(tmp_path / "t.json.gz")
    with pytest.raises(SpecmodelError, match="is a directory"):
        read_json(tmp_path)


def test_stats_median_and_iqr():
    from specmodel.stats import iqr, median

    assert median([]) == 0.0 and median([3.0, 1.0, 2.0]) == 2.0
    assert iqr([5.0]) == 0.0
    assert iqr([1.0, 2.0, 3.0, 4.0, 5.0]) == 2.0


def test_gzip_bytes_round_trips_and_is_the_same_for_the_same_data():
    from specmodel.io import gunzip, gzip_bytes

    data = b'{"traceEvents": [' + b",".join(b'{"ph": "X", "ts": %d}' % i for i in range(5000)) + b"]}"
    z = gzip_bytes(data)
    assert gunzip(z, "t") == data and len(z) < len(data) // 5
    # no file name (FLG 0) and mtime 0 in the header: a re-run of the same profile writes the same bytes
    assert z[:8] == b"\x1f\x8b\x08\x00\x00\x00\x00\x00" and gzip_bytes(data) == z
