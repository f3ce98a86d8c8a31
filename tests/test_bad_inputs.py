"""The bad-input corpus (tests/data/bad_inputs/, written by scripts/make_bad_inputs.py): every
command on every case must print exactly ONE line ``specmodel: error: ...`` on stderr and exit 2
- no traceback, no usage block, no hang, nothing written.

The ~100 command lines run in one Python process (tests/cli_batch.py calls ``specmodel.cli.main``
in-process with fresh cwd and captured streams); the first case of every command also runs as a
real subprocess, so the console entry point itself is covered."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import DATA, REFERENCE, checkout_env, run_cli

BAD = DATA / "bad_inputs"
REF = str(REFERENCE)
SG = str(DATA / "logs_sglang_055" / "server.log")
NCCL = str(DATA / "nccl_tests_pcie8" / "all_reduce_perf.txt")
TRACE = str(DATA / "kineto_cpu_gloo_tp2" / "cpu-gloo-rank0.trace.json.gz")
LONG_NAME = "x" * 300
B = str(BAD)
#: the reference profile with one field at an extreme (tests/fuzz.py PROFILE_MUTATIONS)
MUT = str(DATA / "profile_mutated")

#: (id, argv). {W} is a workspace shared by the whole test run, holding drafters, a file and a read-only path.
CASES: list[tuple[str, list[str]]] = [
    # ---- 1. click's own usage errors
    ("usage-bad-int", ["predict", "--batch", "abc"]),
    ("usage-unknown-flag", ["predict", "--no-such-flag"]),
    ("usage-missing-option", ["check-drafter"]),
    ("usage-bad-choice", ["predict", "--accept-convention", "bits"]),
    ("usage-out-dir-file", ["profile", "--out-dir", B + "/a_file"]),
    ("usage-sglang-tp0", ["sglang", "--tp", "0"]),
    ("usage-vllm-tp0", ["vllm", "--tp", "0"]),
    ("usage-no-such-command", ["no-such-command"]),
    ("usage-accept-bad-int", ["accept", "--steps", "x", SG]),
    ("usage-ingest-no-inputs", ["ingest"]),
    ("usage-report-bad-int", ["report", "--max-batch", "many"]),
    ("usage-validate-range", ["validate", "--steps", "0", SG]),
    ("usage-nccl-choice", ["nccl-tests", "--algorithm", "tree", NCCL]),
    ("usage-root-flag", ["--no-such-flag"]),
    ("usage-float", ["predict", "--accept-len", "two"]),
    # ---- 5. bounds on every count (flags)
    ("bound-predict-steps", ["predict", "--accept-len", "2", "--steps", "1000000000"]),
    ("bound-predict-batch", ["predict", "--accept-len", "2", "--batch", "100000000"]),
    ("bound-predict-topk", ["predict", "--accept-len", "2", "--topk", "100000"]),
    ("bound-predict-ndt", ["predict", "--accept-len", "2", "--num-draft-tokens", "100000"]),
    ("bound-predict-gen", ["predict", "--accept-len", "2", "--gen-tokens", "1000000000000"]),
    ("bound-predict-tp", ["predict", "--baseline-tps", "80", "--verify-ms", "27", "--accept-len", "2", "--tp", "1000"]),
    ("bound-predict-int-digits", ["predict", "--accept-len", "2", "--steps", "9" * 5000]),
    ("bound-plan-batches", ["plan", "--accept-len", "2", "--batches", "1,100000000"]),
    ("bound-plan-contexts", ["plan", "--accept-len", "2", "--contexts", "0,999999999999K"]),
    ("bound-plan-steps", ["plan", "--accept-len", "2", "--steps", "1000000000"]),
    ("bound-predict-context", ["predict", "--accept-len", "2", "--context", "99999999999K"]),
    ("bound-predict-context-digits", ["predict", "--accept-len", "2", "--context", "9" * 5000]),
    ("bound-report-steps", ["report", "--accept-len", "2", "--steps", "1000000000", "-o", "{W}/r.pdf"]),
    ("bound-profile-tp", ["profile", "--tp", "1000"]),
    ("bound-profile-steps", ["profile", "--steps", "1000000000"]),
    ("bound-profile-cycles", ["profile", "--spec-loop", "--cycles", "1000000000"]),
    ("bound-profile-repeats", ["profile", "--repeats", "1000000000"]),
    ("bound-profile-batches", ["profile", "--batches", "1,100000000"]),
    ("bound-profile-sizes", ["profile", "--allreduce-sizes", "4,1000000G"]),
    ("bound-profile-context", ["profile", "--context-len", "1000000000000"]),
    ("bound-ingest-jobs", ["ingest", "--jobs", "100000", TRACE]),
    ("bound-ingest-topk", ["ingest", "--topk", "100000", TRACE]),
    ("bound-accept-steps", ["accept", SG, "--steps", "1000000000"]),
    ("bound-accept-spec-tokens", ["accept", SG, "--num-spec-tokens", "1000000000"]),
    ("bound-validate-steps", ["validate", "--profile", REF, SG, "--steps", "1000000000"]),
    ("bound-nccl-tp", ["nccl-tests", NCCL, "--tp", "1000"]),
    # ---- 5. bounds on values from files
    ("file-profile-steps", ["predict", "--profile", B + "/profile_steps_1e9", "--accept-len", "2"]),
    ("file-profile-topk", ["predict", "--profile", B + "/profile_topk_1e6", "--accept-len", "2"]),
    ("file-profile-tp", ["predict", "--profile", B + "/profile_tp_1000", "--accept-len", "2"]),
    ("file-profile-batch", ["predict", "--profile", B + "/profile_batch_huge", "--accept-len", "2"]),
    ("file-bench-steps", ["accept", B + "/bench_steps_1e9.jsonl"]),
    ("file-bench-steps-predict", ["predict", "--accept-log", B + "/bench_steps_1e9.jsonl"]),
    ("file-bench-batch", ["validate", "--profile", REF, B + "/bench_batch_huge.jsonl"]),
    ("file-accept-probs", ["predict", "--accept-log", B + "/accept_probs_huge.json"]),
    ("file-profile-spread-1e308", ["predict", "--profile", MUT + "/spread_s_1e308.json", "--accept-len", "2"]),
    ("file-profile-ci95-1e308", ["predict", "--profile", MUT + "/ci95_rel_1e308.json", "--accept-len", "2",
                                 "--request-tokens", "64"]),
    ("file-profile-alpha-1e308", ["report", "--profile", MUT + "/alpha_s_1e308.json", "--accept-len", "2",
                                  "-o", "{W}/r.pdf"]),
    ("file-profile-beta-tiny", ["plan", "--profile", MUT + "/beta_bytes_per_s_1e-308.json", "--accept-len", "2"]),
    ("file-vllm-per-position", ["accept", B + "/vllm_per_position_many.log"]),
    # ---- 2. JSON / gzip / text readers
    ("json-deep", ["predict", "--profile", B + "/deep.json", "--accept-len", "2"]),
    ("json-bigint", ["predict", "--profile", B + "/bigint.json", "--accept-len", "2"]),
    ("json-bigint-field", ["predict", "--profile", B + "/profile_bigint", "--accept-len", "2"]),
    ("json-overflow-float", ["predict", "--profile", B + "/profile_overflow", "--accept-len", "2"]),
    ("json-not-object", ["predict", "--profile", B + "/profile_not_object", "--accept-len", "2"]),
    ("gzip-corrupt", ["predict", "--profile", B + "/corrupt.json.gz", "--accept-len", "2"]),
    ("gzip-truncated", ["predict", "--profile", B + "/truncated.json.gz", "--accept-len", "2"]),
    ("profile-binary", ["predict", "--profile", B + "/binary.bin", "--accept-len", "2"]),
    ("profile-empty", ["predict", "--profile", B + "/empty.json", "--accept-len", "2"]),
    ("report-profile-deep", ["report", "--profile", B + "/deep.json", "--accept-len", "2", "-o", "{W}/r.pdf"]),
    ("log-sglang-bigint", ["accept", B + "/sglang_bigint.log", "--steps", "3"]),
    ("log-sglang-truncated", ["accept", B + "/sglang_truncated.log", "--steps", "3"]),
    ("log-sglang-inf", ["accept", B + "/sglang_accept_inf.log", "--steps", "3"]),
    ("log-vllm-bigint", ["accept", B + "/vllm_bigint.log"]),
    ("log-vllm-running-bigint", ["accept", B + "/vllm_running_bigint.log"]),
    ("log-vllm-accepted-gt", ["accept", B + "/vllm_accepted_gt_drafted.log"]),
    ("log-bench-deep", ["accept", B + "/bench_deep.jsonl"]),
    ("log-bench-bigint", ["accept", B + "/bench_bigint.jsonl"]),
    ("log-bench-list", ["accept", B + "/bench_list_steps.jsonl"]),
    ("log-accept-deep", ["accept", B + "/accept_deep.json"]),
    ("log-gzip-truncated", ["accept", B + "/log.gz", "--steps", "3"]),
    ("log-binary", ["accept", B + "/binary.bin"]),
    ("log-dir", ["accept", B + "/a_directory"]),
    ("log-empty", ["accept", B + "/empty.json"]),
    ("log-validate-bigint", ["validate", "--profile", REF, B + "/sglang_bigint.log", "--steps", "3"]),
    ("log-predict-deep", ["predict", "--accept-log", B + "/bench_deep.jsonl"]),
    ("watch-unreachable", ["watch", "http://127.0.0.1:9/metrics", "--profile", REF, "--once", "--timeout", "1"]),
    ("watch-log-binary", ["watch", B + "/binary.bin", "--profile", REF, "--once"]),
    ("nccl-truncated-row", ["nccl-tests", B + "/nccl_truncated_row.txt"]),
    ("nccl-half-row", ["nccl-tests", B + "/nccl_half_row.txt"]),
    ("nccl-bigint-rank", ["nccl-tests", B + "/nccl_bigint_rank.txt"]),
    ("nccl-bigint-size", ["nccl-tests", B + "/nccl_bigint_size.txt"]),
    ("nccl-binary", ["nccl-tests", B + "/binary.bin"]),
    ("nccl-nan-time", ["nccl-tests", B + "/nccl_nan_time.txt"]),
    ("nccl-gzip", ["nccl-tests", B + "/corrupt.json.gz"]),
    ("nccl-dir", ["nccl-tests", B + "/a_directory"]),
    ("nccl-empty", ["nccl-tests", B + "/empty.json"]),
    ("trace-pid-list", ["ingest", B + "/trace_pid_list.json", "--no-save"]),
    ("trace-ext-dict", ["ingest", B + "/trace_ext_dict.json", "--no-save"]),
    ("trace-ts-overflow", ["ingest", B + "/trace_ts_overflow.json", "--no-save"]),
    ("trace-bigint", ["ingest", B + "/trace_bigint.json", "--no-save"]),
    ("trace-deep", ["ingest", B + "/trace_deep.json", "--no-save"]),
    ("trace-gzip-corrupt", ["ingest", B + "/trace_corrupt.json.gz", "--no-save"]),
    ("trace-span-bigbatch", ["ingest", B + "/trace_span_bigbatch.json", "--no-save"]),
    ("trace-not-object", ["ingest", B + "/trace_not_object.json", "--no-save"]),
    ("trace-binary", ["ingest", B + "/binary.bin", "--no-save"]),
    ("trace-baseline-deep", ["ingest", TRACE, "--baseline", B + "/deep.json", "--no-save"]),
    ("sglang-summarize-deep", ["sglang", "--summarize", B + "/sglang_forward", "-o", "{W}/sg"]),
    ("sglang-summarize-bigint", ["sglang", "--summarize", B + "/sglang_forward_bigint", "-o", "{W}/sg"]),
    ("vllm-summarize-deep", ["vllm", "--summarize", B + "/sglang_forward", "-o", "{W}/vl"]),
    ("vllm-summarize-bigint", ["vllm", "--summarize", B + "/sglang_forward_bigint", "-o", "{W}/vl"]),
    ("drafter-token-freq-deep", ["check-drafter", "--drafter", "{W}/drafter_ok", "--target", "{W}/target",
                                 "--token-freq", B + "/token_freq_deep.json"]),
    ("drafter-token-freq-bigint", ["check-drafter", "--drafter", "{W}/drafter_ok", "--target", "{W}/target",
                                   "--token-freq", B + "/token_freq_bigint.json"]),
    ("drafter-config-deep", ["check-drafter", "--drafter", "{W}/drafter_deep_config", "--target", "{W}/target"]),
    # ---- 6. accepted nonsense
    ("calibrate-inf", ["predict", "--accept-len", "2", "--calibrate", "1,2,inf"]),
    ("accept-hist-sum-overflow", ["predict", "--accept-hist", "1:1e308,2:1e308"]),
    ("calibrate-accept-above-steps", ["predict", "--accept-len", "2", "--calibrate", "1,100,60"]),
    ("calibrate-accept-5-steps-3", ["predict", "--accept-len", "2", "--calibrate", "1,5,60"]),
    ("calibrate-implausible", ["predict", "--accept-len", "2", "--calibrate", "1,2.0,1e9"]),
    ("calibrate-nan", ["predict", "--accept-len", "2", "--calibrate", "1,nan,60"]),
    ("calibrate-report", ["report", "--accept-len", "2", "--calibrate", "1,2.0,1e9", "-o", "{W}/r.pdf"]),
    ("per-position-inf", ["predict", "--per-position", "0.5,inf"]),
    ("overhead-huge-report", ["report", "--accept-len", "2", "--overhead-ms", "1e308", "-o", "{W}/r.pdf"]),
    ("verify-tiny", ["predict", "--accept-len", "2", "--verify-ms", "1e-300", "--baseline-tps", "80"]),
    ("baseline-tps-huge", ["predict", "--accept-len", "2", "--verify-ms", "27", "--baseline-tps", "1e300"]),
    ("sweep-binary", ["predict", "--baseline-sweep", B + "/binary.bin", "--accept-len", "2", "--draft-ms", "1"]),
    ("sweep-overflow", ["predict", "--baseline-sweep", B + "/sweep_overflow.csv", "--accept-len", "2", "--draft-ms", "1"]),
    ("sweep-batch-huge", ["predict", "--baseline-sweep", B + "/sweep_batch_huge.csv", "--accept-len", "2",
                          "--draft-ms", "1"]),
    # ---- 3. outputs
    ("out-accept-under-file", ["accept", SG, "--steps", "3", "-o", B + "/a_file/x.json"]),
    ("out-accept-readonly", ["accept", SG, "--steps", "3", "-o", "/proc/specmodel-x.json"]),
    ("out-accept-is-dir", ["accept", SG, "--steps", "3", "-o", B + "/a_directory"]),
    ("out-accept-long-name", ["accept", SG, "--steps", "3", "-o", "{W}/" + LONG_NAME + ".json"]),
    ("out-nccl-under-file", ["nccl-tests", NCCL, "-o", B + "/a_file/x.json"]),
    ("out-nccl-readonly", ["nccl-tests", NCCL, "-o", "/proc/specmodel-x.json"]),
    ("out-report-under-file", ["report", "--accept-len", "2", "-o", B + "/a_file/x.pdf"]),
    ("out-report-readonly", ["report", "--accept-len", "2", "-o", "/proc/specmodel-x.pdf"]),
    ("out-report-png-dir-file", ["report", "--accept-len", "2", "-o", "{W}/png/x.pdf", "--png-dir", B + "/a_file"]),
    ("out-report-long-name", ["report", "--accept-len", "2", "-o", "{W}/" + LONG_NAME + ".pdf"]),
    ("out-ingest-under-file", ["ingest", TRACE, "-o", B + "/a_file/x"]),
    ("out-ingest-csv-readonly", ["ingest", TRACE, "--no-save", "--csv", "/proc/specmodel-x.csv"]),
    ("out-sglang-summarize-file", ["sglang", "--summarize", B + "/a_file", "-o", "{W}/sg"]),
    ("out-sglang-out-file", ["sglang", "--out", B + "/a_file", "--", "true"]),
    ("out-vllm-summarize-file", ["vllm", "--summarize", B + "/a_file", "-o", "{W}/vl"]),
    ("out-vllm-out-file", ["vllm", "--out", B + "/a_file", "--", "true"]),
    # ---- 4. paths
    ("path-profile-long", ["predict", "--profile", LONG_NAME, "--accept-len", "2"]),
    ("path-profile-json-dir", ["predict", "--profile", B + "/profile.json", "--accept-len", "2"]),
    ("path-accept-hist-dir", ["predict", "--accept-hist", B + "/a_directory"]),
    ("path-accept-hist-binary", ["predict", "--accept-hist", B + "/hist_binary.csv"]),
    ("path-accept-hist-bigint", ["predict", "--accept-hist", B + "/hist_bigint.json"]),
    ("path-accept-hist-deep", ["predict", "--accept-hist", B + "/hist_deep.json"]),
    ("path-accept-hist-negative", ["predict", "--accept-hist", B + "/hist_negative.csv"]),
    ("path-accept-hist-huge-value", ["predict", "--accept-hist", B + "/hist_value_huge.csv"]),
    ("path-accept-hist-long-missing", ["predict", "--accept-hist", LONG_NAME]),
    ("path-accept-log-long", ["accept", LONG_NAME]),
    ("path-ingest-long", ["ingest", LONG_NAME]),
    ("path-nccl-long", ["nccl-tests", LONG_NAME]),
    ("path-drafter-long", ["check-drafter", "--drafter", LONG_NAME, "--target", LONG_NAME]),
    ("path-accept-log-latin1", ["accept", B + "/latin1.log"]),
    ("path-newline-in-name", ["accept", "a\nb.log"]),
    ("path-undecodable-name", ["accept", "\udcff\udcfe.log"]),
    # ---- 7. names confined, indexes confined
    ("name-ingest-dotdot", ["ingest", TRACE, "--name", "../../escaped"]),
    ("name-ingest-absolute", ["ingest", TRACE, "--name", "/tmp/escaped"]),
    ("name-ingest-hidden", ["ingest", TRACE, "--name", ".hidden"]),
    ("name-profile-dotdot", ["profile", "--name", "../escaped"]),
    ("out-profile-deep-destination", ["profile", "--out-dir", "{W}/deepdest", "--name", "x"]),
    ("out-profile-out-dir-proc", ["profile", "--out-dir", "/proc/specmodel-profiles", "--name", "x"]),
    ("drafter-index-absolute", ["check-drafter", "--drafter", "{W}/drafter_abs", "--target", "{W}/target"]),
    ("drafter-index-dotdot", ["check-drafter", "--drafter", "{W}/drafter_dotdot", "--target", "{W}/target"]),
    ("drafter-index-symlink", ["check-drafter", "--drafter", "{W}/drafter_symlink", "--target", "{W}/target"]),
]


def _workspace(w: Path) -> None:
    """Drafter checkpoints whose index points outside them, and a plain target."""
    from tests.test_drafter_safetensors import write_drafter, write_target

    write_target(w / "target")
    write_drafter(w / "drafter_ok")
    for name, target in (("drafter_abs", "/etc/passwd"), ("drafter_dotdot", "../drafter_ok/model.safetensors"),
                         ("drafter_symlink", "shard.safetensors")):
        d = write_drafter(w / name, shards=2)
        idx = json.loads((d / "model.safetensors.index.json").read_text())
        first = next(iter(idx["weight_map"]))
        idx["weight_map"][first] = target
        (d / "model.safetensors.index.json").write_text(json.dumps(idx))
        if name == "drafter_symlink":
            (d / "shard.safetensors").symlink_to(w / "drafter_ok" / "model.safetensors")
    (w / "deepdest" / "x").mkdir(parents=True)
    (w / "deepdest" / "x" / "profile.json").write_text("[" * 20000 + "]" * 20000)
    d = write_drafter(w / "drafter_deep_config")
    (d / "config.json").write_text("[" * 20000 + "]" * 20000)


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, object]]:
    w = tmp_path_factory.mktemp("bad_inputs_ws")
    _workspace(w)
    batch = []
    for cid, argv in CASES:
        cwd = w / "cwd" / cid
        cwd.mkdir(parents=True)
        batch.append({"id": cid, "argv": [a.replace("{W}", str(w)) for a in argv], "cwd": str(cwd)})
    r = subprocess.run([sys.executable, "-m", "tests.cli_batch"], input=json.dumps(batch), capture_output=True,
                       text=True, timeout=600, env=checkout_env())
    assert r.returncode == 0, r.stderr[-4000:]
    out = {x["id"]: x for x in json.loads(r.stdout)}
    for cid, _ in CASES:
        out[cid]["cwd"] = str(w / "cwd" / cid)
    out["_workspace"] = {"path": str(w)}
    return out


def check_one_line(rc: object, stderr: str, what: str) -> None:
    assert "Traceback" not in stderr, f"{what}: traceback\n{stderr}"
    lines = stderr.splitlines()
    assert rc == 2, f"{what}: exit {rc}, stderr:\n{stderr}"
    assert len(lines) == 1, f"{what}: {len(lines)} lines on stderr:\n{stderr}"
    assert lines[0].startswith("specmodel: error: "), f"{what}: {lines[0]!r}"
    assert len(lines[0]) < 1200, f"{what}: a {len(lines[0])}-character line"


@pytest.mark.parametrize("cid", [c for c, _ in CASES])
def test_every_bad_input_is_one_line_and_exit_2(results: dict[str, dict[str, object]], cid: str) -> None:
    r = results[cid]
    check_one_line(r["rc"], str(r["stderr"]), cid)
    # nothing written where the command ran
    assert not any(Path(str(r["cwd"])).iterdir()), f"{cid}: wrote {list(Path(str(r['cwd'])).iterdir())}"


def _first_per_command() -> list[tuple[str, list[str]]]:
    seen: dict[str, tuple[str, list[str]]] = {}
    for cid, argv in CASES:
        if argv[0] not in seen and not argv[0].startswith("-") and argv[0] != "no-such-command":
            seen[argv[0]] = (cid, argv)
    return list(seen.values())


def test_the_corpus_covers_every_command() -> None:
    from specmodel.cli import COMMANDS

    assert {c for _, (c, *_) in _first_per_command()} == set(COMMANDS)


@pytest.mark.parametrize("cid,argv", _first_per_command(), ids=[c for c, _ in _first_per_command()])
def test_one_real_subprocess_per_command(tmp_path: Path, results: dict[str, dict[str, object]], cid: str,
                                         argv: list[str]) -> None:
    w = str(results["_workspace"]["path"])
    r = run_cli(*[a.replace("{W}", w) for a in argv], cwd=tmp_path, timeout=300)
    check_one_line(r.returncode, r.stderr, cid)
    assert r.stderr == results[cid]["stderr"], "in-process and subprocess runs differ"


def test_a_profile_spread_of_1e308_is_one_line_naming_file_and_field(tmp_path: Path) -> None:
    # found by mutation fuzzing of `predict --profile`: finite, but its square overflowed model/costs.py
    seed = DATA / "profile_mutated" / "spread_s_1e308.json"
    r = run_cli("predict", "--profile", str(seed), "--accept-len", "2", cwd=tmp_path, timeout=300)
    check_one_line(r.returncode, r.stderr, "spread_s 1e308")
    assert f"{seed}: costs[0]: " in r.stderr and "spread_s must be <= 3600 s, got 1e+308" in r.stderr, r.stderr
    assert not any(tmp_path.iterdir())


def test_help_is_still_normal_help() -> None:
    r = run_cli("predict", "--help")
    assert r.returncode == 0 and r.stderr == ""
    assert r.stdout.startswith("Usage: specmodel predict [OPTIONS]")
    assert "--steps INTEGER RANGE" in r.stdout and "1<=x<=64" in r.stdout  # the bound is stated
    bare = run_cli()
    assert "Commands:" in bare.stdout + bare.stderr and "error" not in bare.stderr  # the help, not an error
    v = run_cli("--version")
    assert v.returncode == 0 and v.stdout.startswith("specmodel, version")


def test_a_log_with_40k_digit_numbers_is_read_in_bounded_time(tmp_path: Path) -> None:
    # the numbers are junk the parser skips (a 'tokens/x' unit, a non-finite mean); the file parses
    r = run_cli("accept", str(BAD / "vllm_long_number.log"), "--json", cwd=tmp_path, timeout=300)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["steps"] == 3


def test_report_png_dir_that_is_a_file_writes_nothing(tmp_path: Path) -> None:
    (tmp_path / "afile").write_text("x")
    r = run_cli("report", "--accept-len", "2", "-o", str(tmp_path / "out" / "x.pdf"), "--png-dir",
                str(tmp_path / "afile"), cwd=tmp_path)
    check_one_line(r.returncode, r.stderr, "png-dir")
    assert "--png-dir" in r.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["afile"]


def test_a_long_valid_accept_hist_parses_as_a_histogram(tmp_path: Path) -> None:
    hist = ",".join(f"{v}:{c}" for v, c in ((1, 1000000), (2, 3000000), (3, 4000000), (4, 2000000)) * 20)
    assert len(hist) > 255
    r = run_cli("predict", "--accept-hist", hist, "--json", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["accept_mean_tokens"] == pytest.approx((1 * 1 + 2 * 3 + 3 * 4 + 4 * 2) / 10)


def test_names_and_index_entries_stay_inside(results: dict[str, dict[str, object]]) -> None:
    w = Path(str(results["_workspace"]["path"]))
    assert not (w / "escaped").exists() and not Path("/tmp/escaped").exists()
    for cid in ("drafter-index-absolute", "drafter-index-dotdot", "drafter-index-symlink"):
        assert "outside" in str(results[cid]["stderr"]), results[cid]["stderr"]
    assert "/etc/passwd" in str(results["drafter-index-absolute"]["stderr"])


def test_messages_name_the_flag_or_file(results: dict[str, dict[str, object]]) -> None:
    expect = {
        "usage-bad-int": "--batch", "usage-missing-option": "--drafter", "usage-bad-choice": "--accept-convention",
        "usage-out-dir-file": "--out-dir", "usage-sglang-tp0": "--tp", "usage-vllm-tp0": "--tp", "bound-predict-steps": "--steps",
        "bound-profile-tp": "--tp", "file-profile-steps": "spec.steps", "json-deep": "deep.json",
        "nccl-truncated-row": "nccl_truncated_row.txt:", "trace-pid-list": "pid", "calibrate-inf": "--calibrate",
        "out-report-png-dir-file": "--png-dir", "path-profile-json-dir": "is a directory",
        "name-ingest-dotdot": "--name", "out-accept-readonly": "/proc/specmodel-x.json",
        "log-vllm-bigint": "Accepted", "trace-ext-dict": "External id",
        "vllm-summarize-deep": "rank0.jsonl: line 1", "out-vllm-out-file": "--out",
        "file-profile-spread-1e308": "spread_s_1e308.json: costs[0]: cost row decode(batch=1, tokens=1): spread_s",
        "file-profile-ci95-1e308": "ci95_rel_1e308.json: costs[1]: ", "file-profile-alpha-1e308": "allreduce_fit: alpha_s",
        "file-profile-beta-tiny": "allreduce_fit: beta_bytes_per_s",
        "accept-hist-sum-overflow": "--accept-hist: the counts add up past the largest float",
    }
    for cid, frag in expect.items():
        assert frag in str(results[cid]["stderr"]), (cid, results[cid]["stderr"])


def test_corpus_files_are_the_generated_ones(tmp_path: Path) -> None:
    # scripts/make_bad_inputs.py writes the corpus: a hand edit (or a stale corpus) would drift from it
    import importlib.util

    spec = importlib.util.spec_from_file_location("make_bad_inputs", BAD.parent.parent.parent / "scripts" /
                                                  "make_bad_inputs.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    mod.main(tmp_path / "corpus")

    def files(root: Path) -> dict[str, bytes]:
        return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}

    want, have = files(tmp_path / "corpus"), files(BAD)
    assert sorted(want) == sorted(have)
    assert [n for n in want if want[n] != have[n] and not n.endswith(".gz")] == []
