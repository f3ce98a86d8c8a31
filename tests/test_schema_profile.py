from __future__ import annotations

import json
import math

import pytest

from specmodel.errors import SpecmodelError
from specmodel.schema import load_profile, profile_from_dict, profile_to_dict, save_profile

from .conftest import REFERENCE, REPO


@pytest.fixture
def ref_dict():
    return json.loads((REFERENCE / "profile.json").read_text())


def test_round_trip(tmp_path):
    p = load_profile(REFERENCE)
    out = save_profile(p, tmp_path / "x")
    assert out == tmp_path / "x" / "profile.json"
    q = load_profile(tmp_path / "x")
    assert profile_to_dict(q) == profile_to_dict(p)


@pytest.mark.parametrize("mutate,match", [
    (lambda d: d.update(schema="something.else"), "schema"),
    (lambda d: d.update(schema_version=99), "schema_version"),
    (lambda d: d.pop("costs"), "costs"),
    (lambda d: d["costs"][0].update(total_s=-1.0), r"costs\[0\].*total_s"),
    (lambda d: d["costs"][0].update(allreduce_s="fast"), r"costs\[0\].*allreduce_s"),
    (lambda d: d["costs"][0].update(kind="prefill"), "kind"),
    (lambda d: d["costs"][0].update(compute_s=1.0), "does not add up"),
    (lambda d: d.update(tp=0), "tp"),
    (lambda d: d["spec"].update(num_draft_tokens=9), "num_draft_tokens"),
    (lambda d: d.update(costs=[c for c in d["costs"] if c["kind"] != "decode"]), "decode"),
    (lambda d: d["costs"].append(dict(d["costs"][0])), "duplicate"),
    (lambda d: d.update(overhead_s=math.inf), "overhead_s"),
])
def test_validation_names_the_field(ref_dict, mutate, match):
    mutate(ref_dict)
    with pytest.raises(SpecmodelError, match=match) as ei:
        profile_from_dict(ref_dict, "some/profile.json")
    assert str(ei.value).startswith("some/profile.json")
    assert "\n" not in str(ei.value)


def test_failed_save_leaves_previous_file_untouched(tmp_path, ref_dict):
    p = load_profile(REFERENCE)
    path = save_profile(p, tmp_path)
    before = path.read_bytes()
    bad = p.with_costs(list(p.costs))
    object.__setattr__(bad, "overhead_s", float("nan"))  # corrupt after validation
    with pytest.raises((SpecmodelError, ValueError)):
        save_profile(bad, tmp_path)
    assert path.read_bytes() == before
    assert [f.name for f in tmp_path.iterdir()] == ["profile.json"]  # no temp files left behind


def test_load_errors_are_one_line(tmp_path):
    (tmp_path / "profile.json").write_text("{not json")
    with pytest.raises(SpecmodelError, match="invalid JSON"):
        load_profile(tmp_path)
    with pytest.raises(SpecmodelError, match="not found"):
        load_profile(tmp_path / "nope")


V1_PROFILE = REPO / "tests" / "data" / "profile_v1" / "profile.json"


def test_v1_profile_loads_with_its_recorded_context():
    """A schema-v1 file (no per-row context) still loads: model.context_len becomes every row's context."""
    raw = json.loads(V1_PROFILE.read_text())
    assert raw["schema_version"] == 1 and all("context_tokens" not in c for c in raw["costs"])
    p = load_profile(V1_PROFILE)
    assert {r.context_tokens for r in p.costs} == {raw["model"]["context_len"]} == {4096}
    # written back it is v2, with the context on every row
    d = profile_to_dict(p)
    assert d["schema_version"] == 2 and all(c["context_tokens"] == 4096 for c in d["costs"])


def test_v2_row_needs_context_tokens(ref_dict):
    del ref_dict["costs"][0]["context_tokens"]
    with pytest.raises(SpecmodelError, match=r"costs\[0\].*context_tokens"):
        profile_from_dict(ref_dict, "p.json")


def test_rows_differing_only_in_context_are_distinct(ref_dict):
    extra = dict(ref_dict["costs"][0], context_tokens=32768)
    ref_dict["costs"].append(extra)
    p = profile_from_dict(ref_dict, "p.json")
    assert sorted(r.context_tokens for r in p.rows("decode") if r.batch == 1 and r.tokens == 1) == [0, 32768]


def test_source_kind_is_checked_on_load_and_when_scanning(tmp_path, ref_dict):
    from specmodel.schema.profile import SOURCE_KINDS, read_source_kind

    bad = dict(ref_dict, source={"kind": "measurd"})
    with pytest.raises(SpecmodelError, match=r"source: kind: unknown 'measurd' \(expected one of measured, "):
        profile_from_dict(bad, "p.json")
    assert read_source_kind(REFERENCE / "profile.json") == "reference" and "reference" in SOURCE_KINDS
    (tmp_path / "typo.json").write_text(json.dumps(bad))
    (tmp_path / "list.json").write_text("[1, 2]")
    (tmp_path / "junk.json").write_text("{not json")
    other = dict(ref_dict, schema="specmodel.accept")
    (tmp_path / "other.json").write_text(json.dumps(other))
    for name in ("typo.json", "list.json", "junk.json", "other.json", "missing.json"):
        assert read_source_kind(tmp_path / name) is None, name
    ok = dict(ref_dict, source={"kind": "ingested"})
    (tmp_path / "ok.json").write_text(json.dumps(ok))
    assert read_source_kind(tmp_path / "ok.json") == "ingested"
