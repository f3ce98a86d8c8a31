"""The end-to-end check: a real speculative loop on the same TP stack, measured in tok/s.

Per cycle, as SGLang's EAGLE worker runs it: one draft-extend forward of the drafter over the
last verified tokens (target aux hidden states through ``fc``), ``steps − 1`` draft forwards
(``batch × topk`` tokens each, top-k selection between them), one target verify forward over
``batch × num_draft_tokens`` tokens, a greedy comparison of the target's tokens with the drafts.
Weights are random, so acceptance is injected: each request's emitted tokens per cycle
(bonus included) are drawn from the given distribution with one seed on every rank.

The baseline is the same stack decoding one token per request per step. The two are measured in
alternating chunks (``rounds`` of each, interleaved like pyperf compares two things, so drift on
the box lands on both), each chunk timed wall-clock from a barrier to the slowest rank's finish;
each forward is also timed (annotation seam) so the cycle splits into forwards and the overhead
outside them.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from specmodel.profile.annotate import Stopwatch, phase, timed_phase
from specmodel.profile.result import LoopBaseline, LoopSpec, SpecLoopResult
from specmodel.schema.phases import forward_tokens, phase_label

if TYPE_CHECKING:
    from specmodel.profile.worker import Rank


def _mean(watches: list[Stopwatch]) -> float:
    return sum(w.elapsed_s for w in watches) / len(watches) if watches else 0.0


def run_loop(r: Rank) -> SpecLoopResult:
    p = r.plan
    sl = p.spec_loop
    assert sl is not None and r.target is not None and r.drafter is not None
    target, drafter, comm = r.target, r.drafter, r.comm
    b, steps, topk, ndt = sl.batch, p.steps, p.topk, p.num_draft_tokens
    V, H = p.target.vocab_size, p.drafter.hidden_size
    g = torch.Generator(device="cpu").manual_seed(p.seed + 7)
    rng = np.random.default_rng(sl.seed)  # the same draws on every rank
    probs = np.asarray(sl.accept_probs, dtype=float)
    probs = probs / probs.sum()
    dev = r.device

    # ---------------------------------------------------------------- baseline decode loop
    r.next_unit("spec loop: baseline")
    ids = torch.randint(0, V, (b, 1), generator=g).to(dev)
    dec_label = phase_label("decode", b, b)

    def decode_step(x: torch.Tensor) -> torch.Tensor:
        logits, _ = target(x)
        return logits[:, -1:].argmax(dim=-1) % V

    for _ in range(sl.warmup):
        ids = decode_step(ids)

    # ---------------------------------------------------------------- speculative loop
    r.next_unit("spec loop: speculative")
    de_label = phase_label("draft_extend", b, forward_tokens("draft_extend", b, p))
    dr_label = phase_label("draft", b, forward_tokens("draft", b, p))
    ve_label = phase_label("verify", b, forward_tokens("verify", b, p))
    ver_ids = torch.randint(0, V, (b, ndt), generator=g).to(dev)
    _, aux = target(ver_ids)
    watches: dict[str, list[Stopwatch]] = {"draft_extend": [], "draft": [], "verify": []}
    hist = np.zeros(steps + 1, dtype=np.int64)

    def cycle(record: bool) -> None:
        nonlocal ver_ids, aux
        with timed_phase(de_label, dev) as sw:
            logits, h = drafter(ver_ids, aux, "causal", last_only=True)
        tok = logits[:, -1].topk(topk, dim=-1).indices % V  # (b, topk)
        hidden = h[:, -1:].expand(b, topk, H).contiguous()
        drafted = [tok]
        ws = [("draft_extend", sw)]
        for _ in range(steps - 1):
            with timed_phase(dr_label, dev) as sw:
                logits, hidden = drafter(tok, hidden, "diag" if topk > 1 else "causal")
            ws.append(("draft", sw))
            tok = logits.argmax(dim=-1) % V
            drafted.append(tok)
        tree = torch.cat([ver_ids[:, -1:], *drafted], dim=1)[:, :ndt]
        with timed_phase(ve_label, dev) as sw:
            logits_v, aux = target(tree, "causal")
        ws.append(("verify", sw))
        pred = logits_v.argmax(dim=-1)
        _ = int((pred[:, :-1] == tree[:, 1:]).sum())  # the greedy check a real verify does
        emitted = rng.choice(np.arange(1, steps + 2), size=b, p=probs)
        ver_ids = tree
        if record:
            for k, w in ws:
                watches[k].append(w)
            np.add.at(hist, emitted - 1, 1)

    for _ in range(sl.warmup):
        cycle(False)

    # interleaved, as pyperf compares two things: baseline and speculative chunks alternate, so
    # drift on the box lands on both; each chunk starts after a barrier and ends on the slowest rank
    def timed(fn: Any, n: int) -> float:
        comm.barrier()
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        r.sync()
        t = torch.tensor([time.perf_counter() - t0], dtype=torch.float64, device=dev if r.cuda else "cpu")
        comm.all_reduce(t, op="max")
        return float(t.item())

    def base_step() -> None:
        nonlocal ids
        with phase(dec_label):
            ids = decode_step(ids)

    rounds = max(1, min(sl.rounds, sl.cycles))
    per = [sl.cycles // rounds + (1 if i < sl.cycles % rounds else 0) for i in range(rounds)]
    base_t, spec_t = [], []
    for n in per:
        base_t.append(timed(base_step, n))
        spec_t.append(timed(lambda: cycle(True), n))
    base_elapsed, spec_elapsed = sum(base_t), sum(spec_t)
    parts = torch.tensor([_mean(watches["draft_extend"]), _mean(watches["draft"]), _mean(watches["verify"])],
                         dtype=torch.float64, device=dev if r.cuda else "cpu")
    comm.all_reduce(parts)
    de, dr, ve = (float(x) / r.world for x in parts.cpu())
    cycle_s = spec_elapsed / sl.cycles
    tokens = int(sum((j + 1) * int(c) for j, c in enumerate(hist)))
    return SpecLoopResult(
        batch=b, cycles=sl.cycles, steps=steps, topk=topk, num_draft_tokens=ndt, accept_len_requested=sl.accept_len,
        rounds=rounds,
        # per round: speculative cycles per baseline step time, i.e. speedup at 1 token per cycle
        round_cycle_over_step=tuple((st / n) / (bt / n) for bt, st, n in zip(base_t, spec_t, per, strict=True)),
        baseline=LoopBaseline(elapsed_s=base_elapsed, tokens=b * sl.cycles, tokens_per_s=b * sl.cycles / base_elapsed,
                              step_s=base_elapsed / sl.cycles),
        spec=LoopSpec(elapsed_s=spec_elapsed, tokens=tokens, tokens_per_s=tokens / spec_elapsed, cycle_s=cycle_s,
                      draft_extend_s=de, draft_step_s=dr, verify_s=ve,
                      overhead_s=max(cycle_s - (de + (steps - 1) * dr + ve), 0.0),
                      accept_hist={str(j + 1): int(c) for j, c in enumerate(hist)},
                      accept_mean=tokens / (b * sl.cycles)),
    )
