"""Model shapes for `specmodel profile`: HF config.json parsing, presets, scaling, and the
all-reduce structure of the TP stack (counted per forward on one process, no communication)."""

from __future__ import annotations

from pathlib import Path

import pytest

from specmodel.commands.flags import flag_of
from specmodel.errors import FieldError, SpecmodelError
from specmodel.model import memory as M
from specmodel.profile import configs as C
from specmodel.profile.plan import Point, RunPlan, SpecLoopPlan, sweep_points

DATA = Path(__file__).resolve().parent / "data" / "profile_configs"


@pytest.mark.parametrize("fname,family,attention,experts", [
    ("llama3_8b.json", "llama", "gqa", 0),
    ("qwen3_moe.json", "qwen", "gqa", 128),
    ("kimi_k25.json", "deepseek", "mla", 384),
    ("deepseek_v3.json", "deepseek", "mla", 256),
])
def test_hf_configs_parse(fname, family, attention, experts):
    s, where = C.load_shape(str(DATA / fname), None)
    assert (s.family, s.attention, s.n_experts) == (family, attention, experts)
    assert where.endswith(fname)
    assert s.allreduce_per_forward == 2 * s.num_layers + 1


def test_kimi_k25_reads_text_config_and_layer_kinds():
    s, _ = C.load_shape(str(DATA / "kimi_k25.json"), None)
    assert (s.hidden_size, s.num_layers, s.num_heads, s.kv_lora_rank, s.topk) == (7168, 61, 64, 512, 8)
    assert s.architecture == "KimiK25ForConditionalGeneration"
    assert not s.layer_is_moe(0) and s.layer_is_moe(1) and s.layer_is_moe(60)
    assert s.shared_intermediate_size == 2048


def test_directory_with_config_json(tmp_path):
    (tmp_path / "config.json").write_text((DATA / "llama3_8b.json").read_text())
    s, where = C.load_shape(str(tmp_path), None)
    assert s.family == "llama" and where.endswith("config.json")


@pytest.mark.parametrize("preset", sorted(C.PRESETS))
def test_presets(preset):
    s, where = C.load_shape(None, preset)
    assert where == f"preset {preset}" and s.family in C.FAMILIES


@pytest.mark.parametrize("arg,fragment", [
    (str(DATA / "broken.json"), "invalid JSON at line"),
    (str(DATA / "unknown_arch.json"), "unknown architecture"),
    (str(DATA / "does-not-exist.json"), "file not found"),
])
def test_bad_configs(arg, fragment):
    with pytest.raises(SpecmodelError, match=fragment):
        C.load_shape(arg, None)


def test_unknown_preset_and_both_sources():
    with pytest.raises(SpecmodelError, match="unknown 'nope'"):
        C.load_shape(None, "nope")
    with pytest.raises(SpecmodelError, match="not both"):
        C.load_shape(str(DATA / "llama3_8b.json"), "kimi-k2.5")


def test_missing_field_names_it(tmp_path):
    p = tmp_path / "config.json"
    p.write_text('{"model_type": "llama", "hidden_size": 64, "num_attention_heads": 4, "vocab_size": 100}')
    with pytest.raises(SpecmodelError, match="num_hidden_layers: missing"):
        C.load_shape(str(p), None)


def test_drafter_from_its_config():
    t, _ = C.load_shape(str(DATA / "llama3_8b.json"), None)
    d = C.drafter_for(t, str(DATA / "eagle3_drafter.json"))
    assert (d.hidden_size, d.num_kv_heads, d.draft_vocab_size, d.target_hidden_size) == (4096, 8, 32000, 4096)


@pytest.mark.parametrize("preset", ["kimi-k2.5", "llama-3.1-8b", "qwen3-235b-a22b", "deepseek-v3"])
@pytest.mark.parametrize("tp", [1, 2, 4, 8])
def test_scaling_keeps_tp_divisibility_and_records_itself(preset, tp):
    s, src = C.load_shape(None, preset)
    d = C.drafter_for(s)
    su, du, sc = C.scale(s, d, tp, layers=C.CPU_LAYERS, hidden=C.CPU_HIDDEN, reason="test")
    C.check_tp(su, du, tp, src)  # raises if any sharded dim is not divisible
    assert su.num_layers == C.CPU_LAYERS and su.hidden_size == C.CPU_HIDDEN
    assert sc["scaled"] and sc["original"]["hidden_size"] == s.hidden_size and sc["used"]["hidden_size"] == 512
    assert sc["factor"]["hidden"] == pytest.approx(512 / s.hidden_size)
    assert sc["factor"]["layers"] == pytest.approx(C.CPU_LAYERS / s.num_layers)
    if s.n_experts:
        assert any(su.layer_is_moe(i) for i in range(su.num_layers))
    assert all(0 <= i < su.num_layers for i in su.aux_layer_ids)


def test_full_size_is_not_scaled():
    s, _ = C.load_shape(None, "llama-3.1-8b")
    d = C.drafter_for(s)
    su, du, sc = C.scale(s, d, 8, layers=None, hidden=None, max_experts=None, max_topk=None, max_vocab=None,
                         reason="full")
    assert su == s and not sc["scaled"]


def test_check_tp_names_the_dimension():
    s, src = C.load_shape(None, "llama-3.1-8b")
    d = C.drafter_for(s)
    with pytest.raises(FieldError) as err:
        C.check_tp(s, d, 3, src)
    assert "not divisible by --tp 3" in err.value.render(flag_of)  # (as the CLI spells it)


def test_layers_that_fit():
    s, _ = C.load_shape(None, "kimi-k2.5")
    per_layer, outside = M.per_rank_weight_bytes(s, 8, 2)
    assert per_layer > 1e9  # 384 experts x 3 x 7168 x 256 x 2 B per rank
    assert M.layers_that_fit(s, 8, 2, 140 * 2**30) == int((140 * 2**30 * 0.6 - outside) // per_layer)
    assert M.layers_that_fit(s, 8, 2, 2**20) == 0


def test_sweep_points_and_plan_roundtrip(tmp_path):
    pts = sweep_points(kinds=("decode", "verify", "draft", "draft_extend"), batches=(1, 2), verify_tokens=(2, 4, 8),
                       topk=1, num_draft_tokens=4)
    kinds = [(p.kind, p.batch, p.tokens) for p in pts]
    assert kinds == [("decode", 1, 1), ("decode", 2, 2), ("verify", 1, 2), ("verify", 1, 4), ("verify", 1, 8),
                     ("verify", 2, 8), ("draft", 1, 1), ("draft", 2, 2), ("draft_extend", 1, 4),
                     ("draft_extend", 2, 8)]
    assert pts[0].label == "specmodel.decode[bs=1,toks=1]"
    with pytest.raises(SpecmodelError, match="decode"):
        sweep_points(kinds=("verify",), batches=(1,), verify_tokens=(4,), topk=1, num_draft_tokens=4)
    s, src = C.load_shape(None, "kimi-k2.5")
    d = C.drafter_for(s)
    su, du, sc = C.scale(s, d, 2, layers=2, hidden=256, reason="t")
    plan = RunPlan(name="x", tp=2, backend="gloo", device="cpu", dtype="float32", target=su, drafter=du, scaling=sc,
                   model_source=src, points=pts, allreduce_sizes=(4, 1024),
                   spec_loop=SpecLoopPlan(accept_probs=(0.5, 0.5), accept_len=1.5))
    plan.save(tmp_path / "plan.json")
    back = RunPlan.load(tmp_path / "plan.json")
    assert back == plan
    assert back.units()[-1] == "spec loop: speculative" and len(back.units()) == len(pts) + 1 + 2 + 2
    assert back.units()[len(pts)] == "interleaved timing passes"
    assert isinstance(back.points[0], Point)


@pytest.mark.torch
@pytest.mark.parametrize("preset", ["kimi-k2.5", "llama-3.1-8b", "qwen3-235b-a22b", "qwen3-32b"])
@pytest.mark.parametrize("tp", [2, 8])
def test_collectives_per_forward_match_the_architecture(preset, tp):
    """Target: 2L+1 all-reduces of tokens*hidden*4 B and 1 logits all-gather; drafter: 3 + 1."""
    import torch

    from specmodel.profile.models import Drafter, TargetModel
    from specmodel.profile.tp import RecordingComm

    s, _ = C.load_shape(None, preset)
    su, du, _ = C.scale(s, C.drafter_for(s), tp, layers=3, hidden=256, reason="t")
    comm = RecordingComm(tp)
    kw = dict(kv_tokens=2 * 20, max_pos=20, past=16, dtype=torch.float32, device="cpu")
    torch.manual_seed(0)
    target = TargetModel(su, comm, **kw)
    drafter = Drafter(du, comm, **kw)
    ids = torch.randint(0, su.vocab_size, (2, 4))
    logits, aux = target(ids)
    assert logits.shape == (2, 4, su.vocab_size) and aux.shape == (2, 4, 3 * su.hidden_size)
    assert torch.isfinite(logits).all()
    ar = [b for c, b in comm.calls if c == "all_reduce"]
    assert len(ar) == 2 * su.num_layers + 1 == su.allreduce_per_forward
    assert set(ar) == {2 * 4 * su.hidden_size * 4}
    assert [c for c, _ in comm.calls].count("all_gather") == 1
    comm.calls.clear()
    dl, h = drafter(ids, aux, last_only=True)  # draft-extend: fc over the aux states
    assert dl.shape == (2, 1, du.draft_vocab_size)
    assert [c for c, _ in comm.calls].count("all_reduce") == 3 == du.allreduce_per_forward
    comm.calls.clear()
    dl2, _ = drafter(ids[:, :1], h[:, -1:])  # a draft step
    assert dl2.shape == (2, 1, du.draft_vocab_size)
    assert [c for c, _ in comm.calls].count("all_reduce") == 3


def test_run_result_is_typed_and_round_trips_result_json(tmp_path):
    # the worker's result, read by the launcher, commands/profile and output, is
    # a RunResult (result.json through to_dict/from_dict), not a free dict
    import json

    from specmodel.profile.output import build_profile, costs_csv, ranks_csv
    from specmodel.profile.result import AllReduceResult, RankRow, RowResult, RunResult

    s, src = C.load_shape(None, "kimi-k2.5")
    d = C.drafter_for(s)
    su, du, sc = C.scale(s, d, 2, layers=2, hidden=256, reason="t")
    plan = RunPlan(name="x", tp=2, backend="gloo", device="cpu", dtype="float32", target=su, drafter=du, scaling=sc,
                   model_source=src, context_len=64, contexts=(64,))
    row = RowResult(kind="decode", batch=1, tokens=1, label="specmodel.decode[bs=1,toks=1]", context_tokens=64,
                    total_s=0.01, allreduce_s=0.004, compute_s=0.006, skew_s=0.001, spread_s=0.0002, samples=5,
                    n_allreduce=5, n_allgather=1, calls_matched=False, passes=7, ci95_rel=0.01,
                    per_rank=(RankRow(rank=0, total_s=0.01, allreduce_s=0.004, skew_s=0.001, transfer_s=0.003),
                              RankRow(rank=1, total_s=0.01, allreduce_s=0.005, skew_s=0.0, transfer_s=0.005)))
    res = RunResult(plan=plan, rows=(row,), allreduce_points=(AllReduceResult(msg_bytes=4, latency_s=1e-5, spread_s=0.0),
                                                              AllReduceResult(msg_bytes=4096, latency_s=3e-5,
                                                                              spread_s=1e-6)),
                    hardware={"hostname": "h"}, finished_utc="2026-12-01T00:00:00+00:00")
    back = RunResult.from_dict(json.loads(json.dumps(res.to_dict())))
    assert back == res
    prof = build_profile(back)
    r = prof.costs[0]
    assert (r.kind, r.context_tokens, r.allreduce_msg_bytes, r.ci95_rel) == ("decode", 64, 256 * 4, 0.01)
    assert prof.allreduce_fit is not None and prof.source.created_utc == res.finished_utc
    assert any("different collective sequences" in n for n in prof.notes)  # calls_matched False is read
    assert ranks_csv(back).splitlines()[2].startswith("decode,1,1,64,1,")
    assert costs_csv(back).splitlines()[1].startswith("decode,1,1,64,0.01,")
    assert "per_rank" not in row.to_dict(per_rank=False)
