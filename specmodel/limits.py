"""Upper bounds on every count a user or a file can set, and on what a reader will take in.

Why bounds at all: the model allocates per step (an accept distribution has steps + 1 entries),
the profiler starts one process per rank, and a parser's work grows with its input; a typo such
as ``--steps 1000000000`` must be a one-line error, not an out-of-memory kill. Each bound is far
above anything a real deployment uses (SGLang/vLLM drafts run 1-10 steps, TP is 1-16 on a box,
decode batches stay in the hundreds) and is stated in the flag's ``--help``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import click

# ---- speculative shape (SGLang --speculative-num-steps / -eagle-topk / -num-draft-tokens)
MAX_STEPS = 64
MAX_TOPK = 64
MAX_DRAFT_TOKENS = 1024
#: the deepest draft the optimizer searches by default (model/optimize.py; a measured or asked
#: depth above it widens the search): a search bound, not an input bound like MAX_STEPS
SEARCH_MAX_STEPS = 8
#: the widest verify (draft tokens per request, root included) the optimizer searches beyond
#: steps·topk + 1 (SGLang verifies up to topk + (steps-1)·topk² + 1: 457 at steps 8, topk 8, a
#: verify no profile measures): a search bound, like SEARCH_MAX_STEPS
SEARCH_MAX_DRAFT_TOKENS = 64
# ---- operating point
MAX_BATCH = 65_536
MAX_TP = 64
MAX_CONTEXT_TOKENS = 10_000_000  # a context the model, a profile or a log may name
#: a context ``specmodel profile`` will build a KV cache for (1M tokens per request: beyond any
#: served model today; tighter than MAX_CONTEXT_TOKENS because the profiler allocates it)
MAX_PROFILE_CONTEXT_TOKENS = 1 << 20
#: an engine hook's record (one step / forward): longer than a day is a unit error or a corrupt
#: line, not a measurement; tokens of one step at most a full batch of the longest draft
MAX_HOOK_STEP_S = 86_400.0
MAX_STEP_TOKENS = MAX_BATCH * MAX_DRAFT_TOKENS
MAX_GEN_TOKENS = 100_000_000
# ---- profiler work (processes, forwards per point)
MAX_CYCLES = 100_000
MAX_REPEATS = 10_000
MAX_WARMUP = 10_000
MAX_LAYERS = 1_024
MAX_HIDDEN = 1 << 17
MAX_JOBS = 1_024
MAX_CONTEXTS = 16  # KV lengths one `specmodel profile --contexts` sweeps
# ---- the decision rule (model/decision.py): GO needs a real margin, since measurement noise on
# a PCIe box is a few %, and, where the sample size is known, confidence that the speedup is > 1
GO_MIN_SPEEDUP = 1.10
GO_MIN_P = 0.90
#: vLLM's adaptive-verification start-up table (model/adaptive.py) is trusted where it is within this
#: share of the profile's verify cost: the GO margin, since a verify priced that far off moves the
#: engine's speculate / don't decision across the same margin the verdict needs
ADAPTIVE_TABLE_TRUST_REL = GO_MIN_SPEEDUP - 1.0
# ---- tolerances
#: slack when a logged mean (two decimals, e.g. ``accept len: 4.00``) is compared with a bound:
#: 3.995 prints as 4.00, so a mean up to bound + 0.0051 is the bound, not above it
ROUND_SLACK = 0.0051
#: a forward over more tokens may measure this share cheaper than one over fewer (medians of noisy
#: steps) before the two contradict each other (model/consistency.py); beyond it, on top of the two
#: rows' own spreads, the inputs disagree
COST_ORDER_REL_TOL = 0.10
#: the running-max cost surface may lift a measured row by this share before the output shows the
#: measured value beside the one used (model/costs.py ``Override``)
OVERRIDE_REL_TOL = 0.10
#: two measurements of the same decode step (a baseline server and a speculative server's own
#: decode-shaped steps) may differ by this share, on top of their spreads, before they disagree
SAME_STEP_REL_TOL = 0.25
#: how far beyond the largest measured tokens per forward (or batch) a cost may be extrapolated:
#: one doubling (model/consistency.py ``check_range`` says why); further is refused
MAX_EXTRAPOLATION_FACTOR = 2.0
#: a log window whose tok/s is below this share of the busiest window at the same #running-req (same
#: file, same configuration) spent most of its interval idle: `validate` leaves it out
MIN_BUSY_FRACTION = 0.5
#: more than any GPU link moves per GPU and direction (NVLink 5: 900 GB/s): a fitted all-reduce
#: beta above it is an artefact of the rows (nccl-tests fit warnings)
MAX_LINK_BYTES_PER_S = 1.0e12
#: a fitted beta this many times the best bus bandwidth any nccl-tests row measured is not what the
#: rows show (at bandwidth-bound sizes busbw = the ring model's per-link beta)
MAX_BETA_OVER_MEASURED = 3.0
# ---- readers (specmodel.io): what a file may hold before it is refused
MAX_JSON_DEPTH = 64  # nesting of arrays/objects; Kineto traces use 3
MAX_INT_DIGITS = 40  # an integer literal with more digits is not a count, a size or a timestamp
MAX_LINE_BYTES = 1 << 20  # one log line (vLLM/SGLang lines are < 1 KiB)
MAX_TEXT_BYTES = 1 << 30  # a whole text/JSON file read into memory (logs, profiles, nccl-tests)
#: what `watch` keeps of a log it follows (bounded memory whatever the log's length): its first lines
#: (the start-up configuration) and its most recent bytes (far more than any window of a minute)
WATCH_HEAD_LINES = 2_000
WATCH_TAIL_BYTES = 32 << 20
#: a /metrics window this share of `--window` long, with tokens generated and no draft counted, is a
#: server that proposes nothing (proposal rate 0); shorter, it may be prefills' first tokens only
SILENT_WINDOW_SHARE = 0.9
#: `specmodel watch` on a page with the engine's own costs (SGLang's device timer): a live cost this far
#: from the profile's at the same point (relative), or beyond the profile's 95 % interval where that is
#: wider, has left the profile's interval and is said so
LIVE_COST_DRIFT_REL = 0.05
MAX_METRICS_PAGE_BYTES = 16 << 20  # one Prometheus /metrics scrape (`specmodel watch`; real pages are < 100 KB)
MAX_PROMETHEUS_ANSWER_BYTES = 256 << 20  # one fleet query's answer (`watch --prometheus`): every sample of every server
#: one trace event the compiled pre-filter reads itself; a longer one goes to the standard library's
#: decoder (which reads events of any length): rescanning an unfinished event as more of it
#: arrives stays linear up to here (real events are < 10 KiB)
MAX_COMPILED_EVENT_CHARS = 4 << 20
MAX_SAFETENSORS_HEADER_BYTES = 100_000_000  # a larger safetensors header is not a real one (the spec caps it)

# ---- engine hooks (engines/vllm/hook.py, engines/sglang/hook.py): GPU records waiting for their CUDA events;
# a record that finds the queue full is dropped and counted (the hook never waits on the GPU), so
# memory and what a dying worker loses stay bounded. vLLM's async scheduling keeps the host one or
# two steps ahead of the GPU: 16 leaves room for a stall of several steps before anything is lost
MAX_PENDING_VLLM_STEPS = 16
MAX_PENDING_SGLANG_FORWARDS = 64
#: cycle steps one torch.profiler capture records (``specmodel vllm --capture-steps``): the trace is kept
#: in memory until the export; a thousand steps of a large model is already gigabytes
MAX_CAPTURE_STEPS = 1000
#: a rank or a size in a hook's meta line (TP / PP rank, DP replica): far beyond any deployment; a
#: larger one is a corrupt line. Also bounds ``--dp-rank``
MAX_PROCESS_RANK = 1 << 20


def bounded_int(minimum: int, maximum: int) -> click.IntRange:
    """A click int type that refuses values outside [minimum, maximum]; click prints the range in --help."""
    import click  # (only the commands need it: model/ and schema/ import the constants alone)

    return click.IntRange(min=minimum, max=maximum)


# ---- the box's condition (engines/hook/calibration.py writes a probe, model/consistency.py compares two)
#: samples one calibration probe record may hold (the hook writes 5)
MAX_PROBE_SAMPLES = 1_000
#: two servers' probe medians (the same kernel on the same box) may differ by this share, on top of
#: the two medians' standard errors, before the box counts as in another condition: what separate
#: worker processes on an idle box measured apart (measured: see docs/verdicts.md, box_condition);
#: on a CPU engine the same 0.05 is what two servers' other-work demands (runnable threads per core)
#: may differ by on top of their windows' noise (a twentieth of a core)
CONDITION_REL_TOL = 0.05
#: windows of steps each server's other-work demand needs before a gap can refuse: one window has no
#: spread, so its noise is unknown (a median's standard error needs a spread), and the gap only qualifies
MIN_CONDITION_WINDOWS = 2

# ---- what a profile may record (schema/profile.py): every float that feeds the model's arithmetic
# is finite and inside a physical range, so its squares and sums stay finite (a cost row's spread
# of 1e308 s overflowed the noise term of model/costs.py)
#: any one duration a profile records (a forward's spread, an all-reduce's latency or fixed cost):
#: an hour is beyond every one of them; a larger value is a unit error or a corrupt file
MAX_PROFILE_DURATION_S = 3600.0
#: a cost row's shortest forward (``total_s``): 1 ns, below any kernel launch
MIN_FORWARD_S = 1e-9
#: a cost row's 95 % half-width relative to its median: the interval's end is itself a forward's
#: duration and the median at least MIN_FORWARD_S, so no measured row exceeds their ratio
MAX_CI95_REL = MAX_PROFILE_DURATION_S / MIN_FORWARD_S
#: forwards behind one cost row: a trillion is three decades of steps at 1 ms
MAX_ROW_SAMPLES = 10**12
#: an all-reduce fit's bandwidth: below 1 byte/s no link carries activations (a unit error); the
#: upper side is left open -- it divides, and a flat fit's beta is large by construction
MIN_LINK_BYTES_PER_S = 1.0

#: how many base classes deep the seam checker looks for a member (engines/seams.py; SGLang's
#: Scheduler takes its PD-disaggregation loops from mixins one level up)
MAX_SEAM_BASE_DEPTH = 4
