"""Context on the command line, run as a user runs it: --baseline-sweep CSV errors, --context,
4-field --calibrate, the qualified verdict, `specmodel plan`, and log windows carrying context."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from .conftest import run_cli


def _sweep(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "sweep.csv"
    p.write_text(text)
    return p


GOOD = ("# baseline sweep, tok/s totals\n"
        "batch,context,tokens_per_s\n"
        "1,0,80\n4,0,300\n16,0,1000\n"
        "1,32768,70\n4,32768,240\n16,32768,640\n")


def _predict(*args: str, cwd: Path) -> dict:
    r = run_cli("predict", "--json", *args, cwd=cwd)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


@pytest.mark.parametrize(("text", "needle"), [
    ("batch,context,tok_s\n1,0,80\n", "line 1: unknown column(s) 'tok_s'"),
    ("batch,context,tokens_per_s\n1,0,80\n4,0,300\n1,0,81\n", "line 4: duplicate row for batch 1, context 0 (first on line 2)"),
    ("concurrency,tokens_per_s\n1,80\n1,81\n", "line 3: duplicate row for batch 1"),
    ("batch,context,tokens_per_s\n1,,80\n", "line 2: missing value for 'context'"),
    ("batch,context,tokens_per_s\n1,0\n", "line 2: 2 values for 3 columns"),
    ("batch,tokens_per_s,tokens_per_s_per_request\n1,80,80\n", "names the throughput twice"),
    ("batch,context\n1,0\n", "no throughput column"),
    ("batch,tokens_per_s\n0,80\n", "line 2: batch: must be >= 1"),
    ("batch,context,tokens_per_s\n1,4K,80\n", "line 2: context: expected an integer, got '4K'"),
    ("batch,tokens_per_s\n1,-5\n", "line 2: tokens_per_s: must be a finite number > 0"),
    ("batch,tokens_per_s\n", "no data rows"),
])
def test_sweep_csv_errors_are_one_line_naming_the_row(tmp_path: Path, text: str, needle: str) -> None:
    p = _sweep(tmp_path, text)
    r = run_cli("predict", "--baseline-sweep", str(p), "--accept-len", "3", cwd=tmp_path)
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"specmodel: error: {p}") and needle in lines[0], r.stderr
    assert "Traceback" not in r.stderr


def test_sweep_with_context_column_and_per_request_throughput(tmp_path: Path) -> None:
    total = _predict("--baseline-sweep", str(_sweep(tmp_path, GOOD)), "--accept-len", "3", "--batch", "4",
                     "--context", "32K", "--draft-ms", "1", cwd=tmp_path)
    assert total["context_tokens"] == 32768 and total["baseline_tokens_per_s"] == pytest.approx(240)
    assert total["baseline_tokens_per_s_per_request"] == pytest.approx(60)
    assert total["extrapolated"] == []
    per_req = _sweep(tmp_path, "concurrency,context_tokens,tokens_per_s_per_request\n1,0,80\n4,0,75\n4,32768,60\n")
    d = _predict("--baseline-sweep", str(per_req), "--accept-len", "3", "--batch", "4", "--context", "32768",
                 "--draft-ms", "1", cwd=tmp_path)
    assert d["baseline_tokens_per_s"] == pytest.approx(240)  # 60 per request x 4 requests


def test_default_context_is_stated_and_text_gives_total_and_per_request(tmp_path: Path) -> None:
    r = run_cli("predict", "--baseline-sweep", str(_sweep(tmp_path, GOOD)), "--accept-len", "3", "--batch", "4",
                "--draft-ms", "1", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "context      0 tokens of KV per request (the profile's smallest measured context)" in r.stdout
    assert "baseline     300.0 tok/s total, 75.0 tok/s per request" in r.stdout
    assert "tok/s total," in r.stdout.split("predicted", 1)[1]


def test_extrapolated_verdict_is_qualified_in_text_and_json(tmp_path: Path) -> None:
    sweep = str(_sweep(tmp_path, GOOD))
    d = _predict("--baseline-sweep", sweep, "--accept-len", "1.2", "--batch", "32", "--draft-ms", "1", cwd=tmp_path)
    batch = next(e for e in d["extrapolated"] if e["axis"] == "batch")
    assert (batch["requested"], batch["measured_min"], batch["measured_max"]) == (32, 1, 16)
    r = run_cli("predict", "--baseline-sweep", sweep, "--accept-len", "1.2", "--batch", "32", "--draft-ms", "1",
                cwd=tmp_path)
    verdict = next(ln for ln in r.stdout.splitlines() if ln.startswith("verdict"))
    # a sweep has no verify rows: the verdict is qualified for that too, then the extrapolation
    assert verdict.startswith(f"verdict      {d['verdict']} (verify not measured at context 0: assumed = decode")
    assert "; extrapolated: batch 32 > measured 16" in verdict
    inside = _predict("--baseline-sweep", sweep, "--accept-len", "3", "--batch", "4", "--draft-ms", "1",
                      cwd=tmp_path)
    assert inside["extrapolated"] == []
    # inside the sweep's range nothing is extrapolated, but verify is still the decode curve: assumed
    assert inside["verdict_label"] == f"{inside['verdict']} (verify not measured at context 0: assumed = decode at 16 tokens)"
    assert [a["kind"] for a in inside["assumed"]] == ["verify"] and inside["measured"] is False


def test_calibrate_four_fields_and_three(tmp_path: Path) -> None:
    sweep = str(_sweep(tmp_path, GOOD))
    # predicted at its own calibration point the model returns the observation
    d = _predict("--baseline-sweep", sweep, "--accept-len", "2.5", "--batch", "4", "--context", "32768",
                 "--calibrate", "4,32768,2.5,400", cwd=tmp_path)
    assert d["tokens_per_s"] == pytest.approx(400)
    old = _predict("--baseline-sweep", sweep, "--accept-len", "2.5", "--batch", "4", "--context", "32768",
                   "--calibrate", "4,2.5,400", cwd=tmp_path)
    assert old["tokens_per_s"] == pytest.approx(400)  # 3 fields = at the prediction's context
    other = _predict("--baseline-sweep", sweep, "--accept-len", "2.5", "--batch", "1", "--context", "0",
                     "--calibrate", "4,32768,2.5,400", cwd=tmp_path)
    assert other["calibrated_overhead_s"] == pytest.approx(d["calibrated_overhead_s"])
    r = run_cli("predict", "--accept-len", "2", "--calibrate", "4,x,2,400", cwd=tmp_path)
    assert r.returncode == 2 and "BATCH,CONTEXT,ACCEPT_LEN,TOKENS_PER_S" in r.stderr


def test_bad_context_flag(tmp_path: Path) -> None:
    r = run_cli("predict", "--accept-len", "3", "--context", "lots", cwd=tmp_path)
    assert r.returncode == 2 and r.stderr.startswith("specmodel: error: --context:")


def test_profile_and_sweep_together_is_an_error(tmp_path: Path, reference_profile: Path) -> None:
    r = run_cli("predict", "--accept-len", "3", "--profile", str(reference_profile), "--baseline-sweep",
                str(_sweep(tmp_path, GOOD)), cwd=tmp_path)
    assert r.returncode == 2 and "either --profile or --baseline-sweep, not both" in r.stderr


def test_plan_command_text_and_json(tmp_path: Path) -> None:
    # measured up to batch 64: verify (B x 4 tokens, decode stands in) is measured up to batch 16
    sweep = str(_sweep(tmp_path, GOOD + "64,0,2600\n64,32768,1500\n"))
    args = ("--baseline-sweep", sweep, "--accept-len", "3", "--batches", "1,16,64", "--contexts", "0,32K,128K")
    r = run_cli("plan", *args, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    rows = [ln.split() for ln in r.stdout.splitlines() if ln[:6].strip().isdigit()]
    assert len(rows) == 9
    # a sweep has no verify rows: verify is the decode curve everywhere, so every cell is ASSUMED and
    # nothing is recommended from it, inside the sweep's range or not
    for cols in rows:
        assert cols[2] == "ASSUMED" and cols[3] == "unmeasured", cols
    assert "--speculative-num-steps" not in r.stdout
    assert "specmodel profile --phases decode,verify --batches 16 --verify-tokens 4 --contexts 32768" in r.stdout
    j = run_cli("plan", "--json", *args, cwd=tmp_path)
    assert j.returncode == 0, j.stderr
    doc = json.loads(j.stdout)
    assert doc["schema"] == "specmodel.plan" and doc["schema_version"] == 3
    assert doc["batches"] == [1, 16, 64] and doc["contexts"] == [0, 32768, 131072]
    for c in doc["cells"]:
        assert c["recommended"] is None and c["action"] == "unmeasured" and c["region"] == "ASSUMED"
        assert [(a["kind"], a["fallback"], a["context_tokens"]) for a in c["assumed"]] == [
            ("verify", "decode", c["context_tokens"]), ("draft", "", c["context_tokens"])]
        assert "engine_flags" not in c


def test_plan_never_recommends_the_demo_tree(tmp_path: Path) -> None:
    # on the reference profile a high accept length makes a wide tree best in the model, but trees
    # were never measured: it may be listed, never recommended
    r = run_cli("plan", "--json", "--accept-len", "3.6", "--batches", "1", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    cell = json.loads(r.stdout)["cells"][0]
    assert cell["recommended"]["topk"] == 1 and cell["recommended"]["measured"]
    assert cell["best_extrapolated"] is not None and not cell["best_extrapolated"]["measured"]


def test_sglang_windows_carry_context_and_validate_uses_it(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    fmt = ("[2025-11-30 04:32:%02d TP0] Decode batch, #running-req: %d, #token: %d, token usage: 0.01, "
           "accept len: 3.00, accept rate: 0.75, cuda graph: True, gen throughput (token/s): %.2f, #queue-req: 0, ")
    log.write_text("\n".join(fmt % (i, b, tok, tps) for i, (b, tok, tps) in
                             enumerate([(1, 100, 100.0), (4, 131072, 300.0), (4, 400, 390.0)])) + "\n")
    a = run_cli("accept", str(log), "--steps", "3", "--json", cwd=tmp_path)
    assert a.returncode == 0, a.stderr
    assert [w["context_tokens"] for w in json.loads(a.stdout)["windows"]] == [100.0, 32768.0, 100.0]
    # against the shipped reference (measured at context 0 only) every window is out of range: counted
    ref = run_cli("validate", "--json", str(log), "--steps", "3", cwd=tmp_path)
    assert ref.returncode == 0, ref.stderr
    doc = json.loads(ref.stdout)
    assert doc["summary"]["windows_extrapolated"] == doc["summary"]["windows_compared"] == 3
    assert doc["summary"]["median_abs_error_measured_range"] is None
    assert any("outside the profile's measured range (context)" in w for w in doc["warnings"])
    # with a context sweep behind it the 32K window is predicted at 32K: slower than the 100-token one
    prof = tmp_path / "profiles" / "ctx"
    prof.mkdir(parents=True)
    rows = []
    for L, scale in ((0, 1.0), (32768, 1.5)):
        for b in (1, 4):
            for kind, toks, base in (("decode", b, 0.010), ("verify", 4 * b, 0.015), ("draft", b, 0.001)):
                t = base * scale * (1 + 0.05 * b)
                rows.append({"kind": kind, "batch": b, "tokens": toks, "context_tokens": L, "total_s": t,
                             "allreduce_s": 0.0, "compute_s": t, "other_s": 0.0})
    (prof / "profile.json").write_text(json.dumps({"schema": "specmodel.profile", "schema_version": 2,
                                                   "name": "ctx", "source": {"kind": "measured"}, "tp": 2,
                                                   "costs": rows}))
    v = run_cli("validate", "--json", "--profile", str(prof), str(log), "--steps", "3", cwd=tmp_path)
    assert v.returncode == 0, v.stderr
    wins = json.loads(v.stdout)["windows"]
    by_line = {w["line"]: w for w in wins}
    assert by_line[2]["context_tokens"] == 32768 and by_line[3]["context_tokens"] == 100
    assert by_line[2]["predicted_tokens_per_s"] < by_line[3]["predicted_tokens_per_s"]
    assert by_line[2]["extrapolated"] == [] and by_line[3]["extrapolated"] == []
    assert json.loads(v.stdout)["summary"]["windows_extrapolated"] == 0


def test_vllm_windows_carry_context_when_the_kv_size_is_logged(tmp_path: Path) -> None:
    head = "(APIServer pid=1) INFO 11-30 04:32:%02d [%s] "
    lines = [head % (0, "kv_cache_utils.py:1308") + "GPU KV cache size: 1,000,000 tokens"]
    for i, (run, usage) in enumerate([(2, 1.0), (4, 8.0)], start=1):
        lines.append(head % (10 * i, "loggers.py:335") + "Engine 000: Avg prompt throughput: 0.0 tokens/s, "
                     f"Avg generation throughput: 200.0 tokens/s, Running: {run} reqs, Waiting: 0 reqs, "
                     f"GPU KV cache usage: {usage}%, Prefix cache hit rate: 0.0%")
        lines.append(head % (10 * i, "metrics.py:120") + "SpecDecoding metrics: Mean acceptance length: 2.75, "
                     "Accepted throughput: 71.80 tokens/s, Drafted throughput: 123.00 tokens/s, Accepted: 718 tokens, "
                     "Drafted: 1230 tokens, Per-position acceptance rate: 0.780, 0.571, 0.400, "
                     "Avg Draft acceptance rate: 58.4%")
    log = tmp_path / "vllm.log"
    log.write_text("\n".join(lines) + "\n")
    r = run_cli("accept", str(log), "--json", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    # usage x size / running: 1 % of 1e6 over 2 requests, 8 % over 4
    assert [w["context_tokens"] for w in json.loads(r.stdout)["windows"]] == [5000.0, 20000.0]
    # without the startup line the context is unknown, not guessed
    log.write_text("\n".join(lines[1:]) + "\n")
    r = run_cli("accept", str(log), "--json", cwd=tmp_path)
    assert [w["context_tokens"] for w in json.loads(r.stdout)["windows"]] == [None, None]


def test_plan_rejects_a_bad_grid(tmp_path: Path) -> None:
    for args, needle in ((("--batches", "0,4"), "--batches: every batch must be >= 1"),
                         (("--contexts", "0,lots"), "--contexts: expected a token count")):
        r = run_cli("plan", "--accept-len", "3", *args, cwd=tmp_path)
        assert r.returncode == 2 and r.stderr.strip().startswith("specmodel: error:") and needle in r.stderr, r.stderr
        assert len(r.stderr.strip().splitlines()) == 1


def test_excel_csv_utf8_sweep_with_bom_and_crlf_reads_like_the_plain_file(tmp_path: Path) -> None:
    # Excel's "CSV UTF-8" starts with a byte-order mark and ends lines with CRLF
    plain = tmp_path / "plain.csv"
    plain.write_text(GOOD.replace("# baseline sweep, tok/s totals\n", ""))
    excel = tmp_path / "excel.csv"
    excel.write_bytes(b"\xef\xbb\xbf" + plain.read_text().replace("\n", "\r\n").encode())
    args = ("--accept-len", "3", "--batch", "4", "--context", "32K", "--draft-ms", "1")
    a = _predict("--baseline-sweep", str(plain), *args, cwd=tmp_path)
    b = _predict("--baseline-sweep", str(excel), *args, cwd=tmp_path)
    assert b["baseline_tokens_per_s"] == pytest.approx(240) and b["tokens_per_s"] == a["tokens_per_s"]
