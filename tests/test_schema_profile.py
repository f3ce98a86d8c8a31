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
    from specmodel.schema.source import SOURCE_KINDS, read_source_kind

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


# ---- provenance: a typed, frozen Source

def test_source_is_typed_frozen_and_round_trips_the_file_unchanged(tmp_path):
    import dataclasses

    from specmodel.schema.source import Source

    raw = json.loads((REFERENCE / "profile.json").read_text())
    p = load_profile(REFERENCE)
    assert isinstance(p.source, Source) and p.source.kind == "reference" and p.source.tp_known
    assert profile_to_dict(p)["source"] == raw["source"]  # the on-disk object is unchanged
    with pytest.raises(dataclasses.FrozenInstanceError):
        p.source.kind = "measured"  # type: ignore[misc]
    with pytest.raises(TypeError):
        p.source.details["x"] = 1  # type: ignore[index]
    # keys a front end records for people are kept, typed keys are typed
    src = Source.from_dict({"kind": "ingested", "files": ["a", "b"], "mode": "gpu", "phases": [{"kind": "decode"}],
                            "cost_origin": {"decode": "your flag"}, "tp_known": False})
    assert src.files == ("a", "b") and src.details["mode"] == "gpu" and src.origins == {"decode": "your flag"}
    assert not src.tp_known and Source.from_dict(src.to_dict()) == src


@pytest.mark.parametrize(("source", "needle"), [
    ({"kind": 3}, "source: kind: expected a string"),
    ({"kind": "measurd"}, "source: kind: unknown 'measurd'"),
    ({"description": ["x"]}, "source: description: expected a string"),
    ({"files": "a.json"}, "source: files: expected a list of strings"),
    ({"cost_origin": {"verify": 3}}, "source: cost_origin: expected an object of cost -> string"),
    ({"cost_origin": {"verfy": "flag"}}, "source: cost_origin: unknown cost 'verfy'"),
    ({"tp_known": "no"}, "source: tp_known: expected true or false"),
])
def test_a_bad_source_field_is_one_error_naming_the_file_and_field(ref_dict, source, needle):
    with pytest.raises(SpecmodelError) as exc:
        profile_from_dict(dict(ref_dict, source=source), "f.json")
    assert str(exc.value).startswith("f.json: ") and needle in str(exc.value)


def test_one_constructor_per_origin_sets_the_kind_and_side_fields():
    from specmodel.schema.source import Source

    ref = Source.reference(description="d", tool="t")
    assert [s.kind for s in (
        Source.measured(tool="t", description="d", created_utc="c", method="m"),
        Source.hook_summary(engine="sglang", engine_version="0.5.5", files=("r0",), description="d", clock="x"),
        Source.ingested(description="d", files=()), Source.sweep(path="s.csv", description="d"), ref,
        Source.numbers(tp_known=False),
        Source.derived(base=ref, description="d2", derived_from=("a",), allreduce_from="nccl-tests f"),
    )] == ["measured", "ingested", "ingested", "sweep", "reference", "numbers", "derived"]
    with_flags = ref.with_origins({"verify": "your flag --verify-ms 27"}).with_origins({"draft": "x"}, tp_known=False)
    assert with_flags.origins == {"verify": "your flag --verify-ms 27", "draft": "x"} and not with_flags.tp_known
    assert ref.origins == {} and ref.tp_known  # the original is untouched
    hook = Source.hook_summary(engine="sglang", engine_version="0.5.5", files=(), description="d", clock="cuda_event")
    assert hook.versions() == {"engine_version": "0.5.5"} and hook.details["clock"] == "cuda_event"
