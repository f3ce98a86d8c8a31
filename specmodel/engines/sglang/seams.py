"""SGLang's seams, per checked version (the contract :mod:`specmodel.engines.seams` checks): every
member the hook wraps (:data:`specmodel.engines.sglang.targets.TARGETS` and ``STEP_TARGETS`` are
checked against the members here, both ways), every log text :mod:`specmodel.engines.sglang.log`
matches and every series :mod:`specmodel.engines.sglang.metrics` reads, with the versions each was
read in: 0.5.5 and 0.5.23 (their wheels, parsed).

0.5.23's drafters outside ``ModelRunner.forward``, read in its source: multi-layer EAGLE replays
its draft-extend through ``MultiLayerEagleMultiStepDraftExtendCudaGraphRunner.replay`` /
``OneGraphMultiLayerEagleMultiStepDraftExtendCudaGraphRunner.replay``
(``srt/speculative/multi_layer_eagle_draft_extend_cuda_graph_runner.py``, called by
``multi_layer_eagle_worker_v2.py``); FROZEN_KV_MTP through ``FrozenKVMTPCudaGraphRunner.execute``
(``frozen_kv_mtp_cuda_graph_runner.py``, called by ``frozen_kv_mtp_worker_v2.py``); DFlash runs its
draft block through the draft runner's ``ModelRunner.forward`` (``dflash_worker_v2.py``). HiSparse's
pool line says ``#gpu token:`` (``scheduler_components/pool_stats_observer.py``).
"""

from __future__ import annotations

from typing import Any

from specmodel.engines.seams import Seam, SeamTable

VERSIONS = ("0.5.5", "0.5.23")
_ALL = VERSIONS
_OLD = ("0.5.5",)
_NEW = ("0.5.23",)

RUNNER = "sglang.srt.model_executor.model_runner"
DRAFT = "sglang.srt.speculative.eagle_draft_cuda_graph_runner"
DRAFT_EXTEND = "sglang.srt.speculative.eagle_draft_extend_cuda_graph_runner"
SCHEDULER = "sglang.srt.managers.scheduler"
MULTI_LAYER = "sglang.srt.speculative.multi_layer_eagle_draft_extend_cuda_graph_runner"
FROZEN_KV = "sglang.srt.speculative.frozen_kv_mtp_cuda_graph_runner"
FBI = "sglang.srt.model_executor.forward_batch_info"
ARGS = "sglang.srt.server_args"
SPEC_ARGS = "sglang.srt.arg_groups.fields.spec"


def _m(module: str, cls: str, method: str, role: str, figure: str, *, present: tuple[str, ...] = _ALL,
       absent: tuple[str, ...] = (), required: bool = False, note: str = "") -> Seam:
    return Seam(engine="sglang", kind="method", module=module, cls=cls, method=method, role=role, figure=figure,
                present=present, absent=absent, required=required, note=note)


def _f(module: str, cls: str, name: str, figure: str, *, required: bool = False, present: tuple[str, ...] = _ALL,
       absent: tuple[str, ...] = ()) -> Seam:
    return Seam(engine="sglang", kind="field", module=module, cls=cls, method=name, figure=figure, present=present,
                absent=absent, required=required)


def _t(kind: str, text: str, figure: str, under: str, *, present: tuple[str, ...] = _ALL,
       absent: tuple[str, ...] = ()) -> Seam:
    return Seam(engine="sglang", kind=kind, text=text, figure=figure, under=under, present=present, absent=absent)



SEAMS: tuple[Seam, ...] = (
    _m(RUNNER, "ModelRunner", "forward", "model_runner", "forward_s", required=True),
    # 0.5.23 calls .execute (eagle_worker_v2), 0.5.5 .replay; the hook wraps the first the class has
    _m(DRAFT, "EAGLEDraftCudaGraphRunner", "execute", "draft", "draft_s", present=_NEW, absent=_OLD),
    _m(DRAFT, "EAGLEDraftCudaGraphRunner", "replay", "draft", "draft_s", present=_OLD, absent=_NEW),
    _m(DRAFT_EXTEND, "EAGLEDraftExtendCudaGraphRunner", "execute", "draft_extend", "draft_extend_s",
       present=_NEW, absent=_OLD),
    _m(DRAFT_EXTEND, "EAGLEDraftExtendCudaGraphRunner", "replay", "draft_extend", "draft_extend_s",
       present=_OLD, absent=_NEW),
    _m(SCHEDULER, "Scheduler", "get_next_batch_to_run", "step_boundary", "host_s"),
    _m(SCHEDULER, "Scheduler", "run_batch", "step_batch", "host_s"),
    # PD disaggregation's loops bound their steps here instead (Scheduler's mixins in
    # disaggregation/decode.py and prefill.py; the prefill one from 0.5.23)
    _m(SCHEDULER, "Scheduler", "get_next_disagg_decode_batch_to_run", "", "host_s"),
    _m(SCHEDULER, "Scheduler", "get_next_disagg_prefill_batch_to_run", "", "host_s", present=_NEW, absent=_OLD),
    # 0.5.23's drafters that replay outside ModelRunner.forward: the per-layer draft-extend graph, the
    # composite runner that replays one per step, the single-graph variant, FROZEN_KV_MTP's graph
    # (role "": read in the source; a hook target may take them, with its own role)
    _m(MULTI_LAYER, "MultiLayerEagleDraftExtendCudaGraphRunner", "replay", "", "draft_extend_s",
       present=_NEW, absent=_OLD),
    _m(MULTI_LAYER, "MultiLayerEagleMultiStepDraftExtendCudaGraphRunner", "replay", "", "draft_extend_s",
       present=_NEW, absent=_OLD),
    _m(MULTI_LAYER, "OneGraphMultiLayerEagleMultiStepDraftExtendCudaGraphRunner", "replay", "",
       "draft_extend_s", present=_NEW, absent=_OLD),
    _m(FROZEN_KV, "FrozenKVMTPCudaGraphRunner", "execute", "", "draft_s", present=_NEW, absent=_OLD),
    # the fields the hook reads: a forward's phase, batch and tokens, the runner it ran on, and the
    # speculative configuration its meta line records
    _f(FBI, "ForwardBatch", "forward_mode", "phase", required=True),
    _f(FBI, "ForwardBatch", "batch_size", "batch", required=True),
    _f(FBI, "ForwardBatch", "input_ids", "tokens"),
    _f(RUNNER, "ModelRunner", "is_draft_worker", "phase", required=True),
    # 0.5.5 declares them on ServerArgs; 0.5.23 in arg_groups/fields/spec.py's Spec, whose fields
    # server_args.py flattens onto ServerArgs (collect_input_fields + msgspec.defstruct): the hook's
    # getattr(server_args, name) reads both
    *(_f(where, cls, name, figure, present=present, absent=absent)
      for where, cls, present, absent in ((ARGS, "ServerArgs", _OLD, _NEW), (SPEC_ARGS, "Spec", _NEW, _OLD))
      for name, figure in (("speculative_algorithm", "draft method"), ("speculative_num_steps", "draft steps"),
                           ("speculative_eagle_topk", "draft topk"),
                           ("speculative_num_draft_tokens", "draft tokens"))),
    # the Decode batch line the log reader matches (0.5.5 scheduler_metrics_mixin.py, 0.5.23
    # scheduler_components/metrics_reporter.py and pool_stats_observer.py)
    _t("log", "Decode batch", "acceptance", "srt/managers"),
    _t("log", "#running-req: ", "batch", "srt/managers"),
    _t("log", "accept len: ", "acceptance", "srt/managers"),
    _t("log", "accept rate: ", "acceptance", "srt/managers"),
    _t("log", "gen throughput (token/s): ", "throughput", "srt/managers"),
    _t("log", "#queue-req: ", "queue", "srt/managers"),
    _t("log", "#token: ", "context tokens", "srt/managers"),
    _t("log", "#full token: ", "context tokens", "srt/managers"),
    _t("log", "#gpu token: ", "context tokens", "srt/managers", present=_NEW, absent=_OLD),
    _t("log", "cap len: ", "acceptance", "srt/managers", present=_NEW, absent=_OLD),
    _t("log", "block accept len: ", "acceptance", "srt/managers", present=_NEW, absent=_OLD),
    # the Prometheus series the /metrics reader reads
    _t("metric", "sglang:spec_accept_length", "acceptance", "srt"),
    _t("metric", "sglang:num_running_reqs", "batch", "srt"),
    _t("metric", "sglang:num_used_tokens", "context tokens", "srt"),
    _t("metric", "sglang:gen_throughput", "throughput", "srt"),
)

TABLE = SeamTable(engine="sglang", package="sglang", versions=VERSIONS, seams=SEAMS, dists=("sglang",),
                  label="SGLang")

#: a hook role's figure where a target is not in the table (a member added to the hook first)
_ROLE_FIGURES = {"model_runner": "forward_s", "draft": "draft_s", "draft_extend": "draft_extend_s",
                 "step_boundary": "host_s", "step_batch": "host_s"}


def seam_figure(target: Any) -> str:
    """The figure that rests on a hook target (:class:`specmodel.engines.sglang.targets.Target`)."""
    for method in target.methods:
        s = TABLE.find(target.module, target.cls, method)
        if s is not None:
            return s.figure
    return _ROLE_FIGURES.get(target.role, target.role)
