"""SGLang's draft-tree budget: ``num_draft_tokens`` up to topk + (steps − 1)·topk² + 1 (validation,
defaults, the optimizer's search and its acceptance for such budgets), checked against the real
0.5.23 source and a Monte-Carlo simulation of SGLang drafting a tree and keeping its best budget."""

from __future__ import annotations

import ast
import json
import random
from pathlib import Path

import pytest

from specmodel.errors import SpecmodelError
from specmodel.model.accept import from_mean
from specmodel.model.optimize import accept_model, evaluate_all, expected_tokens, sibling_rates
from specmodel.schema.costrows import SpecConfig
from specmodel.schema.phases import default_num_draft_tokens, draft_steps, max_draft_tokens
from specmodel.schema.profile import load_profile
from tests.conftest import REFERENCE
from tests.sglang_source import function, sglang_module


def test_steps_3_topk_2_with_8_draft_tokens_is_valid_and_the_bound_is_sglangs() -> None:
    # hand count: depth 0 drafts topk = 2 nodes, depths 1 and 2 draft topk^2 = 4 each -> 10 (+ root = 11)
    assert SpecConfig(steps=3, topk=2, num_draft_tokens=8).num_draft_tokens == 8
    assert SpecConfig(steps=3, topk=2, num_draft_tokens=11).num_draft_tokens == 11
    with pytest.raises(SpecmodelError, match=r"spec\.num_draft_tokens: at most .* = 11"):
        SpecConfig(steps=3, topk=2, num_draft_tokens=12)
    # chains keep steps + 1 (SGLang resets the budget to it at topk 1)
    with pytest.raises(SpecmodelError, match="steps \\+ 1 = 4"):
        SpecConfig(steps=3, topk=1, num_draft_tokens=5)
    assert max_draft_tokens(1, 8) == 9 and max_draft_tokens(5, 8) == 8 + 4 * 64 + 1


def test_loading_a_profile_with_a_budget_beyond_steps_times_topk(tmp_path: Path) -> None:
    d = json.loads((Path(REFERENCE) / "profile.json").read_text())
    d["spec"] = {"algorithm": "EAGLE3", "steps": 3, "topk": 2, "num_draft_tokens": 8}
    p = tmp_path / "p.json"
    p.write_text(json.dumps(d))
    assert load_profile(p).spec.num_draft_tokens == 8


def test_shallowest_tree_and_default_budget() -> None:
    # the least depth that drafts ndt - 1 nodes (2 + 4 (s-1) >= ndt - 1 at topk 2)
    assert [draft_steps(n, 2) for n in (2, 3, 4, 7, 8, 11, 12)] == [1, 1, 2, 2, 3, 3, 4]
    assert [draft_steps(n, 1) for n in (2, 4, 9)] == [1, 3, 8]
    assert default_num_draft_tokens(3, 2) == 8  # the tree cap, reachable now (was min(7, 8))
    assert default_num_draft_tokens(1, 2) == 3
    assert default_num_draft_tokens(4, 1) == 5


def _simulate(cond: list[float], steps: int, topk: int, ndt: int, trials: int, rng: random.Random) -> float:
    """Monte-Carlo oracle: SGLang's tree drafting step by step, then walks of the accepted path.

    Drafting (``eagle_worker_v2.draft_forward`` + ``spec_utils.select_top_k_tokens``): the root's
    topk children, then at each later depth the topk best nodes of the last depth (by path score)
    each get topk children; every child's (score, parent index) goes into a flat list exactly as
    ``score_list`` / ``parents_list``; ``organize_draft_results`` keeps the ndt − 1 best scores. The
    drafter is calibrated: a child's score is its path probability under the sibling model (rank j
    accepted with ``sibling_rates(c_d)[j]``, one rank at most). Acceptance: at each depth one rank
    (or none) is drawn; the walk goes on while the drawn child was drafted and kept."""
    nodes: list[tuple[float, int, int]] = []  # (path score, parent node index or -1, rank)
    beam = [(1.0, -1)]
    for d in range(steps):
        q = sibling_rates(cond[d], topk)
        level = [(ps * q[j], parent, j) for ps, parent in beam for j in range(topk)]
        first = len(nodes)
        nodes.extend(level)
        order = sorted(range(len(level)), key=lambda i: -level[i][0])[:topk]
        beam = [(level[i][0], first + i) for i in order]
    assert len(nodes) == topk + (steps - 1) * topk * topk
    kept = set(sorted(range(len(nodes)), key=lambda i: -nodes[i][0])[: ndt - 1])
    children = {(p, j): i for i, (_, p, j) in enumerate(nodes)}
    total = 0
    for _ in range(trials):
        at, length = -1, 1
        for d in range(steps):
            u, acc, rank = rng.random(), 0.0, None
            for j, qj in enumerate(sibling_rates(cond[d], topk)):
                acc += qj
                if u < acc:
                    rank = j
                    break
            nxt = children.get((at, rank)) if rank is not None else None
            if nxt is None or nxt not in kept:
                break
            at, length = nxt, length + 1
        total += length
    return total / trials


@pytest.mark.parametrize(("cond", "steps", "topk", "ndt"), [
    ([0.7, 0.6, 0.55], 3, 2, 8),   # the published configuration, beyond steps*topk + 1 = 7
    ([0.7, 0.6, 0.55], 3, 2, 11),  # every drafted node kept
    ([0.8, 0.5, 0.65, 0.4], 4, 2, 12),
    ([0.5, 0.45, 0.4], 3, 4, 20),
])
def test_tree_acceptance_beyond_steps_times_topk_matches_a_simulation(cond: list[float], steps: int, topk: int,
                                                                         ndt: int) -> None:
    rng = random.Random(1234)
    trials = 60_000
    sim = _simulate(cond, steps, topk, ndt, trials, rng)
    model = expected_tokens(cond, steps=steps, topk=topk, num_draft_tokens=ndt)
    # accept length <= steps + 1: standard error <= (steps + 1) / 2 / sqrt(trials); 5 sigma
    assert model == pytest.approx(sim, abs=5 * (steps + 1) / 2 / trials**0.5)


def test_a_budget_beyond_steps_times_topk_adds_accepted_tokens_and_the_optimizer_ranks_it() -> None:
    cond = [0.7, 0.6, 0.55]
    at7 = expected_tokens(cond, steps=3, topk=2, num_draft_tokens=7)
    at8 = expected_tokens(cond, steps=3, topk=2, num_draft_tokens=8)
    assert at8 > at7
    m = accept_model(from_mean(2.6, 4))
    keys = {c.key for c in evaluate_all(load_profile(REFERENCE), m, batch=1, max_steps=3, topks=(2,))}
    assert {(3, 2, 8), (3, 2, 11)} <= keys and (3, 2, 12) not in keys and (2, 2, 7) in keys


def test_the_drafted_count_is_the_one_in_sglangs_source() -> None:
    """The formula rests on two facts of the 0.5.23 source (parsed, not imported): the first depth's
    scores are ``topk_p.unsqueeze(1)`` (b, 1, topk) and later depths' ``scores.unsqueeze(2) *
    topk_p.view(-1, topk, topk)`` (b, topk, topk); ``organize_draft_results`` keeps
    ``torch.topk(score_list, num_draft_token - 1)``."""
    utils = sglang_module("0.5.23", "srt/speculative/spec_utils.py")
    assert "topk_p.unsqueeze(1)" in ast.unparse(function(utils, "_select_top_k_tokens_first"))
    assert "scores.unsqueeze(2) * topk_p.view(-1, topk, topk)" in ast.unparse(function(utils, "_select_top_k_tokens_later"))
    org = ast.unparse(function(sglang_module("0.5.23", "srt/speculative/eagle_utils.py"), "organize_draft_results"))
    assert "torch.topk(score_list, num_draft_token - 1, dim=-1)" in org
