"""Cost of the SGLang hook's scheduler-step seams per event-loop pass, on the CPU.

One pass of the stand-in scheduler (tests/data/sglang_standin) calls ``get_next_batch_to_run``
(the step's bound) and ``run_batch`` (its batch), both wrapped by the hook over originals that do
nothing, so the figure is the hook's own work per pass: the bound (a ``perf_counter`` read, the
step opened and the last one closed) and the batch's mode and size. A timed forward's own cost
is ``bench_annotation_overhead.py``'s. Wrapped and bare passes alternate in blocks; the figure is
the median over blocks of (wrapped - bare) per pass. Written steps are none (no forward ran), so
no line is written: on a GPU each bound also records one CUDA event.

Run: python benchmarks/bench_sglang_step_overhead.py [BLOCKS]
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from pathlib import Path

STANDIN = Path(__file__).resolve().parent.parent / "tests" / "data" / "sglang_standin"
PASSES = 20_000


def main() -> int:
    blocks = int(sys.argv[1]) if len(sys.argv) > 1 else 15
    sys.path.insert(0, str(STANDIN))
    from specmodel.engines.sglang import hook
    from specmodel.engines.sglang import steps as sgsteps

    with tempfile.TemporaryDirectory() as out:
        hook.install(out)
        try:
            from sglang.srt.managers.scheduler import ScheduleBatch, Scheduler
            from sglang.srt.model_executor.forward_batch_info import ForwardMode

            class Bare:
                def get_next_batch_to_run(self) -> None:
                    return None

                def run_batch(self, batch: object) -> None:
                    return None

            class Wrapped:
                get_next_batch_to_run = sgsteps.make_step_wrapper(hook.STEP_TARGETS[0], "get_next_batch_to_run",
                                                                Bare.get_next_batch_to_run)
                run_batch = sgsteps.make_step_wrapper(hook.STEP_TARGETS[1], "run_batch", Bare.run_batch)
                device = "cpu"

            assert "Scheduler.get_next_batch_to_run" in hook.patched_members() and Scheduler is not None
            batch = ScheduleBatch(ForwardMode.DECODE, 8)

            def per_pass(o: object) -> float:
                nxt, run = o.get_next_batch_to_run, o.run_batch  # type: ignore[attr-defined]
                t0 = time.perf_counter()
                for _ in range(PASSES):
                    nxt()
                    run(batch)
                return (time.perf_counter() - t0) / PASSES

            diffs = []
            for i in range(blocks):
                if i % 2:
                    w, b = per_pass(Wrapped()), per_pass(Bare())
                else:
                    b, w = per_pass(Bare()), per_pass(Wrapped())
                diffs.append(w - b)
        finally:
            hook.uninstall()
    med = statistics.median(diffs)
    print(f"SGLang step seams: {med * 1e6:.2f} us per scheduler pass (median of {blocks} blocks of {PASSES} passes; "
          f"spread {min(diffs) * 1e6:.2f}-{max(diffs) * 1e6:.2f} us)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
