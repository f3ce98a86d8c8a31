"""The box's condition travels with every hook-recorded run, and a baseline recorded on a slower box
is refused.

Real recordings: tests/data/vllm_cpu_032_condition/ (a TP 1 server without speculation and a TP 1
ngram k = 3 server, each under `specmodel vllm` on the live vLLM 0.32 CPU engine, one after the
other: scripts/record_condition_fixtures.py). The loaded baseline is that recording with every
duration multiplied by 1.3 -- its steps and its probe alike, as a box 30 % slower throughout would
record them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from specmodel.engines.vllm.steplog import read_step_log
from specmodel.errors import SpecmodelError
from specmodel.model.boxcheck import check_condition, check_same_step
from specmodel.schema.conditions import Conditions, ServerCondition
from specmodel.schema.costrows import CostRow, HostProposer
from specmodel.schema.profile import Profile, load_profile, profile_from_dict, profile_to_dict
from specmodel.stats import median
from tests.conftest import DATA, run_cli

REC = DATA / "vllm_cpu_032_condition"
BASE, NGRAM = REC / "base" / "hook", REC / "ngram" / "hook"
SLOWER = 1.3
#: the duration fields of a step record (what a slower box stretches)
_STEP_S = ("step_s", "forward_s", "forward_allreduce_s", "draft_s", "draft_allreduce_s", "draft_first_s",
           "draft_first_allreduce_s", "gap_s", "overhead_s")


def _scaled(src: Path, dst: Path, factor: float) -> Path:
    """The recording as a box ``factor`` times slower would have made it: every duration scaled."""
    dst.mkdir(parents=True)
    for f in sorted(src.iterdir()):
        if f.name != "rank0.jsonl":
            (dst / f.name).write_bytes(f.read_bytes())
            continue
        out = []
        for ln in f.read_text().splitlines():
            rec = json.loads(ln)
            if rec.get("type") == "probe":
                rec["samples_s"] = [x * factor for x in rec["samples_s"]]
            elif rec.get("type") == "step":
                for k in _STEP_S:
                    if rec.get(k) is not None:
                        rec[k] = rec[k] * factor
            out.append(json.dumps(rec))
        (dst / f.name).write_text("\n".join(out) + "\n")
    return dst


def _probe_median_ms(d: Path, factor: float = 1.0) -> float:
    xs = [x * factor for p in read_step_log(d / "rank0.jsonl").probes for x in p["samples_s"]]
    return median(xs) * 1e3


# --------------------------------------------------------------------------- the recordings


def test_both_recordings_carry_the_probe_and_summarize_to_both_conditions(tmp_path: Path) -> None:
    for d in (BASE, NGRAM):
        log = read_step_log(d / "rank0.jsonl")
        assert log.probes and log.steps
        assert all(len(p["samples_s"]) == 5 and p["kernel"] == "matmul_f32" for p in log.probes)
    out = tmp_path / "p"
    r = run_cli("vllm", "--summarize", str(BASE), "--summarize", str(NGRAM), "-o", str(out))
    assert r.returncode == 0, r.stderr
    doc = json.loads((out / "profile.json").read_text())
    assert doc["schema_version"] == 5
    c = load_profile(out).conditions
    assert c is not None and c.baseline is not None and c.spec is not None
    assert c.baseline.probe == c.spec.probe
    assert c.baseline.probe_s * 1e3 == pytest.approx(_probe_median_ms(BASE))
    assert c.spec.probe_s * 1e3 == pytest.approx(_probe_median_ms(NGRAM))
    assert c.baseline.samples == 5 * len(read_step_log(BASE / "rank0.jsonl").probes)


def test_a_baseline_recorded_on_a_box_30_percent_slower_is_refused_by_predict(tmp_path: Path) -> None:
    """The reproduction, end to end through the CLI: before the probe this predicted a GO with
    P = 1.00 from the ratio of two box conditions."""
    loaded = _scaled(BASE, tmp_path / "loaded_base", SLOWER)
    out = tmp_path / "loaded"
    r = run_cli("vllm", "--summarize", str(loaded), "--summarize", str(NGRAM), "-o", str(out))
    assert r.returncode == 0, r.stderr
    r = run_cli("predict", "--profile", str(out), "--accept-len", "2.5")
    assert r.returncode == 2, r.stdout
    err = r.stderr.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("specmodel: error: inconsistent inputs:"), err
    base_ms, spec_ms = _probe_median_ms(BASE, SLOWER), _probe_median_ms(NGRAM)
    assert f"calibration probe {base_ms:.3f} ms" in err[0] and f"against {spec_ms:.3f} ms" in err[0]
    assert "re-record the baseline server" in err[0]


def test_the_same_recordings_unscaled_still_give_a_verdict(tmp_path: Path) -> None:
    out = tmp_path / "clean"
    r = run_cli("vllm", "--summarize", str(BASE), "--summarize", str(NGRAM), "-o", str(out))
    assert r.returncode == 0, r.stderr
    r = run_cli("predict", "--profile", str(out), "--accept-len", "2.5", "--json")
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    d = d.get("prediction", d)
    assert d["verdict"] in ("GO", "MARGINAL"), d["verdict_reason"]
    assert not any(i["check"] == "box_condition" for i in d["inconsistencies"])


# --------------------------------------------------------------------------- the noise rule, by hand

#: IQR 0.1349 ms over 25 samples: SE of the median = 1.253 * (0.1349 / 1.349) / 5 = 0.02506 ms
_IQR, _N = 0.1349e-3, 25


def _cond(probe_s: float, *, wait: float | None = None, probe: str = "matmul_f32 128x128 x16 on cpu") -> ServerCondition:
    return ServerCondition(probe=probe, probe_s=probe_s, probe_iqr_s=_IQR, samples=_N, probes=5, wait_share=wait)


def _profile(base: ServerCondition | None, spec: ServerCondition | None, **kw: Any) -> Profile:
    row = CostRow(kind="decode", batch=1, tokens=1, total_s=0.01, allreduce_s=0.0, compute_s=0.008, other_s=0.002,
                  spread_s=0.0005, samples=40)
    return Profile(name="p", source={"kind": "ingested"}, tp=1, costs=(row,),
                   conditions=None if base is None and spec is None else Conditions(baseline=base, spec=spec), **kw)


# both SEs 0.02506 ms: two SEs of the difference = 2 * sqrt(2) * 0.02506 = 0.07088 ms; plus 5 % of the
# larger median. Baseline 1.13 ms vs 1.00: 0.13 > 0.07088 + 0.0565 = 0.12738 ms -> refuse.
# Baseline 1.12 ms: 0.12 < 0.07088 + 0.056 = 0.12688 ms -> the same box.
@pytest.mark.parametrize(("base_ms", "spec_ms", "want"), [
    (1.13, 1.00, "refuse"), (1.12, 1.00, None), (1.00, 1.13, "qualify"), (1.00, 1.12, None), (1.0, 1.0, None)])
def test_the_two_probe_medians_differ_only_beyond_their_noise(base_ms: float, spec_ms: float, want: str | None) -> None:
    got = check_condition(_profile(_cond(base_ms * 1e-3), _cond(spec_ms * 1e-3)))
    assert [i.severity for i in got] == ([want] if want else [])
    if want:
        assert got[0].check == "box_condition" and f"{base_ms:.3f} ms" in got[0].message


def test_time_sharing_the_probe_does_not_see_is_read_from_the_workers_wait_for_a_cpu() -> None:
    # a GPU box's probe: the same median, but the baseline's worker waited half its runnable time:
    # 1.0 / (1 - 0.5) = 2.0 ms
    gpu = "matmul_f32 1024x1024 x8 on cuda (cuda_event)"
    got = check_condition(_profile(_cond(1.0e-3, wait=0.5, probe=gpu), _cond(1.0e-3, wait=0.0, probe=gpu)))
    assert [i.severity for i in got] == ["refuse"] and "2.000 ms with its 50% wait for a CPU" in got[0].message
    # a wait only one side read is not compared: the probe alone decides
    assert check_condition(_profile(_cond(1.0e-3, wait=0.5, probe=gpu), _cond(1.0e-3, probe=gpu))) == ()
    # on a CPU engine the wait is the server's own processes' as much as the box's: not the box's condition
    assert check_condition(_profile(_cond(1.0e-3, wait=0.5), _cond(1.0e-3, wait=0.0))) == ()


def test_no_check_without_both_conditions_under_one_probe() -> None:
    assert check_condition(_profile(None, None)) == ()
    assert check_condition(_profile(_cond(2e-3), None)) == ()
    assert check_condition(_profile(_cond(2e-3), _cond(1e-3, probe="matmul_f32 1024x1024 x8 on cuda"))) == ()


def test_an_equal_box_resolves_a_dearer_speculative_forward_and_tightens_a_dearer_baseline() -> None:
    def prof(base_fwd: float, spec_fwd: float, cond: bool) -> Profile:
        def row(fwd: float) -> CostRow:
            return CostRow(kind="decode", batch=1, tokens=1, total_s=fwd + 0.002, allreduce_s=0.0, compute_s=fwd,
                           other_s=0.002, spread_s=1e-5, samples=40)

        hp = HostProposer(method="ngram", proposal_rate=0.5, request_steps=10, proposed_request_steps=5,
                          lookup_s=1e-4, lookup_steps=10, decode=(row(spec_fwd),))
        c = Conditions(baseline=_cond(1e-3), spec=_cond(1e-3)) if cond else None
        return Profile(name="p", source={"kind": "ingested"}, tp=1, costs=(row(base_fwd),), host_proposer=hp,
                       conditions=c)

    # the speculative server's forward 40 % dearer: without a measured box it may be a busier box (qualify);
    # on a box measured equal it is that server's own cost, priced by its own rows
    def sev(p: Profile) -> set[str]:  # (the lookup reads the row below and above: one row, twice)
        return {i.severity for i in check_same_step(p, batch=1, context_tokens=0)}

    assert sev(prof(0.010, 0.014, False)) == {"qualify"}
    assert sev(prof(0.010, 0.014, True)) == set()
    # the baseline's forward 15 % dearer: within the guessed 25 %, beyond the 10 % of two step medians
    assert sev(prof(0.0115, 0.010, False)) == set()
    assert sev(prof(0.0115, 0.010, True)) == {"refuse"}


# --------------------------------------------------------------------------- the profile block


def test_conditions_round_trip_as_v5_and_older_profiles_still_load(tmp_path: Path) -> None:
    p = _profile(_cond(1e-3, wait=0.1), _cond(1.1e-3))
    d = profile_to_dict(p)
    assert d["schema_version"] == 5
    assert profile_from_dict(d).conditions == p.conditions
    assert profile_to_dict(_profile(None, None))["schema_version"] == 2  # nothing new: still an old file
    d4 = {**d, "schema_version": 4}
    with pytest.raises(SpecmodelError, match="conditions: needs schema_version 5, file has 4"):
        profile_from_dict(d4, "f.json")
    bad = json.loads(json.dumps(d))
    bad["conditions"]["baseline"]["probe_s"] = -1
    with pytest.raises(SpecmodelError, match=r"f.json: conditions: baseline: probe_s"):
        profile_from_dict(bad, "f.json")


def test_a_malformed_probe_record_is_one_line_naming_the_file_line_and_field(tmp_path: Path) -> None:
    d = tmp_path / "h"
    d.mkdir()
    lines = (BASE / "rank0.jsonl").read_text().splitlines()
    i = next(n for n, ln in enumerate(lines) if '"type": "probe"' in ln)
    rec = json.loads(lines[i])
    rec["samples_s"] = [float("nan")]
    lines[i] = json.dumps(rec)
    (d / "rank0.jsonl").write_text("\n".join(lines) + "\n")
    r = run_cli("vllm", "--summarize", str(d), "--summarize", str(NGRAM), "-o", str(tmp_path / "p"))
    assert r.returncode == 2
    err = r.stderr.strip().splitlines()
    assert len(err) == 1 and f"rank0.jsonl: line {i + 1}: samples_s" in err[0]
