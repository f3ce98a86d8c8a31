"""Every on-disk and ``--json`` format specmodel writes, named and versioned in one place.

A document starts with ``{"schema": NAME, "schema_version": N, ...}`` (:meth:`Format.stamp`);
a reader calls :meth:`Format.check` first, which refuses another format or an unreadable
version with one line naming the file. Every writer stamps through its format and every reader
checks through it (tests/test_json_schema.py feeds each reader a wrong schema and version); no
module spells a header by hand, and no format is declared outside :data:`ALL`. The body of each format is built and validated by the
code that owns its content (``schema/profile.py`` for profiles; the modules named below for the
rest); a test checks that every ``--json`` output carries its header.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from specmodel.errors import SpecmodelError


@dataclass(frozen=True, kw_only=True)
class Format:
    """One versioned document type: ``name`` (``specmodel.<what>``), the ``version`` written,
    the versions still ``readable``, and what it is."""

    name: str
    version: int
    readable: tuple[int, ...] = ()
    what: str = ""

    def __post_init__(self) -> None:
        if not self.name.startswith("specmodel."):
            raise ValueError(f"format name {self.name!r} must start with 'specmodel.'")
        if self.version not in self.readable_versions:
            raise ValueError(f"{self.name}: the version written ({self.version}) must be readable")

    @property
    def readable_versions(self) -> tuple[int, ...]:
        return self.readable or (self.version,)

    def header(self) -> dict[str, Any]:
        return {"schema": self.name, "schema_version": self.version}

    def stamp(self, body: Mapping[str, Any]) -> dict[str, Any]:
        """``body`` with this format's header first (a header already in ``body`` is replaced)."""
        out = self.header()
        out.update({k: v for k, v in body.items() if k not in out})
        return out

    def matches(self, doc: Any) -> bool:
        return isinstance(doc, Mapping) and doc.get("schema") == self.name

    def check(self, doc: Any, where: str) -> int:
        """Validate the header of a decoded document; returns its version."""
        if not isinstance(doc, Mapping):
            raise SpecmodelError(f"{where}: expected a JSON object at top level (a {self.what or self.name} file)")
        if doc.get("schema") != self.name:
            raise SpecmodelError(f"{where}: schema: expected {self.name!r}, got {doc.get('schema')!r} "
                                 f"(not a {self.what or self.name} file)")
        ver = doc.get("schema_version")
        if isinstance(ver, bool) or ver not in self.readable_versions:
            raise SpecmodelError(f"{where}: schema_version: this specmodel reads "
                                 f"{', '.join(map(str, self.readable_versions))}, file has {ver!r}")
        return int(ver)


# on disk, read back ------------------------------------------------------------------------------
#: profile.json (schema/profile.py); v1 rows carry no context_tokens; v3 adds ``host_proposer``, v4
#: ``requests``, v5 ``conditions``, v6 a row's ``allreduce_source`` (a profile is written at the lowest
#: version that holds what it has), v7 ``missing_seams`` (the engine seams its hook could not wrap)
PROFILE = Format(name="specmodel.profile", version=7, readable=(1, 2, 3, 4, 5, 6, 7), what="specmodel profile")
#: `specmodel accept -o` / `accept --json` (engines/logs.py); read back by --accept-log
ACCEPT = Format(name="specmodel.accept", version=1, what="specmodel accept")
#: `specmodel nccl-tests -o` without --profile / `nccl-tests --json` (trace/nccl_tests.py)
ALLREDUCE_FIT = Format(name="specmodel.allreduce_fit", version=1, what="specmodel nccl-tests fit")
#: the SGLang hook's per-process JSONL, one record per line (engines/sglang/hook.py); v2: ``step`` records (the
#: scheduler's step: its span, the forwards inside it, its host work), the meta line's tp/pp/dp ranks and
#: ``max_pending_forwards``, each forward's ``dropped_forwards``; v1 logs hold forwards only
SGLANG_FORWARD = Format(name="specmodel.sglang_forward", version=2, readable=(1, 2),
                        what="specmodel sglang forward log")
#: the vLLM hook's per-process JSONL, one engine step per line (engines/vllm/hook.py, read by
#: engines/vllm/hooklog.py); v2: the meta line's tp/pp/dp ranks and ``max_pending_steps``, each step's
#: ``host_step_s`` / ``gpu_step_s`` / ``gpu_gap_s`` / ``step_clock`` (``step_s`` and ``overhead_s`` on that
#: clock; v1: host step − GPU forwards on a GPU) and ``dropped_steps``; v3: the meta line's ``compilation``
#: and ``num_hidden_layers``, a step's ``draft_k`` the K its proposal drafted (0: none, V2's ``skip_drafts``)
VLLM_STEP = Format(name="specmodel.vllm_step", version=3, readable=(1, 2, 3), what="specmodel vllm step log")
#: the vLLM hook's capture sidecar, ``capture/<rank file>.json`` beside its Kineto trace (written by
#: engines/vllm/capture.py, read by engines/vllm/capture_ingest.py)
VLLM_CAPTURE = Format(name="specmodel.vllm_capture", version=1, what="specmodel vllm capture")
#: what `specmodel vllm` ran beside the server's kept output, ``engine_run.json`` (the command after
#: its additions, hook on/off; written and read by engines/vllm/enginerun.py): the engine log's TP and method
VLLM_ENGINE_RUN = Format(name="specmodel.vllm_engine_run", version=1, what="specmodel vllm engine run")
#: the box's condition: one calibration probe per line, inside either hook's per-rank JSONL
#: (written by engines/hook/calibration.py, read by engines/hook/probe.py)
PROBE = Format(name="specmodel.probe", version=1, what="specmodel hook calibration probe")
#: `specmodel plan --engine E --export FILE` / `plan --engine E --json`: engine-native speculation
#: schedules per context band (model/schedule.py); read back by benchmarks and scripts that start the engine
SCHEDULE = Format(name="specmodel.schedule", version=1, what="specmodel plan schedule")

# written for people and tools, not read back -----------------------------------------------------
#: `specmodel predict --json` (model/predict.py Prediction.to_dict); v2: verdict may be INCONSISTENT,
#: `inconsistencies` / `consistent` / `p_withheld` added, `p_speedup_gt_1` null where withheld; v3:
#: `speedup_low` / `speedup_high` (the speedup's band, the baseline's cost interval in it); v4:
#: `request` (a request priced end to end; null without --request-tokens); v5: `foreign_costs` (why the
#: costs are another box's, "" when the user's own), each inconsistency's `beyond_range`, check `beyond_range`;
#: v6: `allreduce_source` ("measured" / "measured (capture)" / "unknown" / "none (TP 1)") and
#: `allreduce_capture` (the cycle kinds whose split a profiler capture gave)
PREDICTION = Format(name="specmodel.prediction", version=6, what="specmodel predict")
#: `specmodel plan --json` and the report's serve plan (model/serveplan.py); v3: each cell's `beyond_range`
#: (why it is not priced; `best_extrapolated` null there)
PLAN = Format(name="specmodel.plan", version=3, what="specmodel plan")
#: the report's JSON beside the PDF (report/view.py)
REPORT = Format(name="specmodel.report", version=1, what="specmodel report")
#: `specmodel validate --json`
VALIDATION = Format(name="specmodel.validation", version=1, what="specmodel validate")
#: `specmodel check-drafter --json` (drafter/findings.py)
DRAFTER_CHECK = Format(name="specmodel.check_drafter", version=1, what="specmodel check-drafter")
#: `specmodel watch --json` (specmodel/live/watch.py Reading.to_dict); v2 adds the engine's own live costs
#: (``live_costs``, ``live_outside``, ``observed.live_costs``), every v1 key kept
WATCH = Format(name="specmodel.watch", version=2, readable=(1, 2), what="specmodel watch")
#: `specmodel ingest --json`: what was read and written
INGEST = Format(name="specmodel.ingest", version=1, what="specmodel ingest")
#: `specmodel profile --json`: the run's outcome
PROFILE_RUN = Format(name="specmodel.profile_run", version=1, what="specmodel profile run")

#: scripts/gpu-check's result file (the device validation run, docs/gpu-validation.md)
GPU_CHECK = Format(name="specmodel.gpu_check", version=1, what="scripts/gpu-check result")
#: scripts/gpu_check_trace.py's result file (the trace side of the device validation)
GPU_CHECK_TRACE = Format(name="specmodel.gpu_check_trace", version=1, what="scripts/gpu_check_trace.py result")

ALL = (PROFILE, ACCEPT, ALLREDUCE_FIT, SGLANG_FORWARD, VLLM_STEP, VLLM_CAPTURE, VLLM_ENGINE_RUN, PROBE, SCHEDULE, PREDICTION, PLAN, REPORT, VALIDATION,
       DRAFTER_CHECK, INGEST, PROFILE_RUN, GPU_CHECK, GPU_CHECK_TRACE, WATCH)
