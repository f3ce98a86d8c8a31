"""Write the bad-input corpus tests/data/bad_inputs/ (deterministic; rerun after changing it).

Each file is one class of hostile or broken input; tests/test_bad_inputs.py runs
every command on them and expects one line `specmodel: error: ...` and exit 2.

    python scripts/make_bad_inputs.py
"""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DATA = REPO / "tests" / "data"
OUT = DATA / "bad_inputs"
REF = REPO / "specmodel" / "reference" / "kimi-k2.5-int4-tp8-pcie" / "profile.json"

BIG = "9" * 5000  # past Python's 4,300-digit int-string limit
DEEP = 20000  # nesting: RecursionError in the C JSON decoder


def w(name: str, data: str | bytes) -> None:
    p = _out / name
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_bytes(data.encode() if isinstance(data, str) else data)


def profile_with(**changes: object) -> str:
    d = json.loads(REF.read_text())
    for k, v in changes.items():
        cur = d
        *head, last = k.split("__")
        for h in head:
            cur = cur[h]
        cur[last] = v
    return json.dumps(d)


_out = OUT


def main(out: Path = OUT) -> None:
    global _out
    _out = out
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    ref_text = REF.read_text()
    # ---- generic files
    w("deep.json", "[" * DEEP + "]" * DEEP)
    w("bigint.json", '{"schema": "specmodel.profile", "schema_version": ' + BIG + "}")
    w("corrupt.json.gz", gzip.compress(ref_text.encode())[:40] + b"\x00garbage" * 8)
    w("truncated.json.gz", gzip.compress(ref_text.encode())[:-30])
    w("binary.bin", bytes(range(256)) * 64)
    w("empty.json", "")
    w("latin1.log", "Decode batch caf\xe9 \x00".encode("latin-1") * 4)
    (out / "a_directory").mkdir()
    (out / "a_directory" / ".keep").write_text("")
    (out / "profile.json").mkdir()  # `--profile bad_inputs/profile.json` names a directory
    (out / "profile.json" / ".keep").write_text("")
    w("a_file", "not a directory\n")
    # ---- profiles: values a file can set
    w("profile_steps_1e9/profile.json", profile_with(spec__steps=1_000_000_000))
    w("profile_topk_1e6/profile.json", profile_with(spec__topk=1_000_000, spec__num_draft_tokens=4))
    w("profile_tp_1000/profile.json", profile_with(tp=1000))
    d = json.loads(ref_text)
    d["costs"][0]["total_s"] = 10**400  # an integer where a float is expected: OverflowError as float
    w("profile_overflow/profile.json", json.dumps(d))
    d = json.loads(ref_text)
    d["costs"][0]["batch"] = 10**30
    w("profile_batch_huge/profile.json", json.dumps(d))
    w("profile_not_object/profile.json", "[1, 2, 3]")
    w("profile_bigint/profile.json", ref_text.replace('"tp": 8', '"tp": ' + BIG, 1))
    # ---- logs
    sg = ("[2025-11-30 04:32:01 TP0] Decode batch, #running-req: {r}, #token: 1140, token usage: 0.01, "
          "accept len: {a}, accept rate: 0.78, cuda graph: True, gen throughput (token/s): {t}, #queue-req: 0, \n")
    w("sglang_bigint.log", sg.format(r=BIG, a="3.13", t="103.40"))
    w("sglang_truncated.log", sg.format(r="1", a="3.13", t="103.40")[:60] + "\n")
    w("sglang_accept_inf.log", sg.format(r="1", a="inf", t="103.40"))
    vl_t = ("(APIServer pid=1) INFO 11-30 04:32:10 [loggers.py:335] Engine 000: Avg generation throughput: {t} "
            "tokens/s, Running: {r} reqs, Waiting: 0 reqs\n")
    vl_s = ("(APIServer pid=1) INFO 11-30 04:32:10 [metrics.py:120] SpecDecoding metrics: Mean acceptance length: 2.75, "
            "Accepted throughput: 71.80 tokens/s, Drafted throughput: 123.00 tokens/s, Accepted: {acc} tokens, "
            "Drafted: {dr} tokens, Per-position acceptance rate: 0.8, 0.6, 0.4\n")
    w("vllm_bigint.log", vl_t.format(t="100", r="1") + vl_s.format(acc=BIG, dr="1230"))
    w("vllm_running_bigint.log", vl_t.format(t="100", r=BIG) + vl_s.format(acc="718", dr="1230"))
    w("vllm_long_number.log", vl_t.format(t="1" * 40000, r="1").replace("tokens/s", "tokens/x") +
      vl_s.format(acc="718", dr="1230").replace("2.75", "2" * 40000 + "x"))
    w("vllm_accepted_gt_drafted.log", vl_t.format(t="100", r="1") + vl_s.format(acc="2000", dr="1230"))
    w("vllm_per_position_many.log", vl_t.format(t="100", r="1") +
      vl_s.format(acc="718", dr="1230").replace("0.8, 0.6, 0.4", ", ".join(["0.5"] * 200)))
    bench = {"batch_size": 1, "steps": 3, "topk": 1, "num_draft_tokens": 4, "acc_length": 2.788,
             "step_time": 0.03039, "speed": 91.741, "completion_tokens": 512.0}
    w("bench_steps_1e9.jsonl", json.dumps({**bench, "steps": 1_000_000_000, "num_draft_tokens": 4}) + "\n")
    w("bench_batch_huge.jsonl", json.dumps({**bench, "batch_size": 10**15}) + "\n")
    w("bench_deep.jsonl", json.dumps(bench) + "\n" + "[" * DEEP + "]" * DEEP + "\n")
    w("bench_bigint.jsonl", json.dumps(bench)[:-1] + ', "x": ' + BIG + "}\n")
    w("bench_list_steps.jsonl", json.dumps({**bench, "steps": [3]}) + "\n")
    acc = {"schema": "specmodel.accept", "schema_version": 1, "probs": [0.001] * 1000, "samples": 1}
    w("accept_probs_huge.json", json.dumps(acc))
    w("accept_deep.json", '{"schema": "specmodel.accept", "schema_version": 1, "probs": ' + "[" * DEEP + "]" * DEEP + "}")
    w("log.gz", gzip.compress(sg.format(r="1", a="3.13", t="103.40").encode())[:-12])
    # ---- nccl-tests
    nccl = (DATA / "nccl_tests_pcie8" / "all_reduce_perf.txt").read_text()
    lines = nccl.splitlines(keepends=True)
    row = next(i for i, ln in enumerate(lines) if ln.strip().startswith("1024 "))
    cut = lines[:row] + [" ".join(lines[row].split()[:3]) + "\n"] + lines[row + 1:]
    w("nccl_truncated_row.txt", "".join(cut))
    w("nccl_half_row.txt", "".join(lines[:row] + [" ".join(lines[row].split()[:9]) + "\n"] + lines[row + 1:]))
    w("nccl_bigint_rank.txt", nccl.replace("#  Rank  0 ", "#  Rank  " + BIG + " ", 1))
    w("nccl_bigint_size.txt", "".join(lines[:row] + [BIG + lines[row].lstrip()[4:]] + lines[row + 1:]))
    w("nccl_nan_time.txt", "".join(lines[:row] + [lines[row].replace(lines[row].split()[5], "nan", 1)] + lines[row + 1:]))
    # ---- Kineto traces
    raw = gzip.decompress((DATA / "kineto_cpu_gloo_tp2" / "cpu-gloo-rank0.trace.json.gz").read_bytes())
    doc = json.loads(raw)
    evs = doc["traceEvents"]

    def trace_with(mutate) -> str:  # type: ignore[no-untyped-def]
        d2 = json.loads(raw)
        mutate(d2["traceEvents"])
        return json.dumps(d2)

    def set_first(pred, key, value):  # type: ignore[no-untyped-def]
        def m(es):  # type: ignore[no-untyped-def]
            for e in es:
                if pred(e):
                    if "." in key:
                        a, b = key.split(".")
                        e.setdefault(a, {})[b] = value
                    else:
                        e[key] = value
                    return
        return m

    is_x = lambda e: e.get("ph") == "X"  # noqa: E731
    is_span = lambda e: e.get("ph") == "X" and str(e.get("name", "")).startswith("specmodel.")  # noqa: E731
    w("trace_pid_list.json", trace_with(set_first(is_x, "pid", [1, 2])))
    w("trace_ext_dict.json", trace_with(set_first(is_span, "args.External id", {"a": 1})))
    w("trace_ts_overflow.json", trace_with(set_first(is_x, "ts", 10**400)))
    w("trace_bigint.json", trace_with(set_first(is_x, "dur", "__BIG__")).replace('"__BIG__"', BIG))
    w("trace_deep.json", '{"traceEvents": [' + "[" * DEEP + "]" * DEEP + "]}")
    w("trace_corrupt.json.gz", gzip.compress(raw)[:200] + b"\xff" * 64)
    w("trace_span_bigbatch.json", trace_with(set_first(is_span, "name", "specmodel.decode[bs=" + BIG + ",toks=1]")))
    w("trace_not_object.json", "[1, 2, 3]")
    assert evs
    # ---- sglang forward logs
    w("sglang_forward/rank0.jsonl", "[" * DEEP + "]" * DEEP + "\n" + '{"schema": "x"}\n')
    w("sglang_forward_bigint/rank0.jsonl", '{"schema": "specmodel.sglang.forward", "v": ' + BIG + "}\n{}\n")
    # ---- histograms
    w("hist_binary.csv", b"\x00\x01\x02" * 100)
    w("hist_bigint.json", '{"' + BIG + '": 3}')
    w("hist_deep.json", "[" * DEEP + "]" * DEEP)
    w("hist_negative.csv", "value,count\n1,10\n2,-5\n")
    w("hist_value_huge.csv", "value,count\n1,10\n100000,5\n")
    # ---- baseline sweep CSV
    w("sweep_overflow.csv", "batch,tokens_per_s\n1e400,80\n")
    w("sweep_batch_huge.csv", "batch,tokens_per_s\n1,80\n1000000000000,90\n")
    w("token_freq_deep.json", "[" * DEEP + "]" * DEEP)
    w("token_freq_bigint.json", '{"1": ' + BIG + "}")
    print(f"wrote {sum(1 for p in out.rglob('*') if p.is_file())} files to {out}")


if __name__ == "__main__":
    main()
