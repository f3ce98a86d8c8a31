"""Stand-in SGLang "server": spawns TP workers (like SGLang does) that run a few speculative
decode iterations through the stand-in classes, then exits with status ``argv[1]``.

    python serve.py EXIT_CODE [TP]

With ``SGLANG_STANDIN_LOOP=scheduler`` each worker runs its iterations through the stand-in
scheduler's event loop instead (``run_scheduled``); ``SGLANG_STANDIN_SPEC=0`` makes it a server
without speculation.
"""

import multiprocessing as mp
import sys


def call_runner(runner, fb):
    """Call the draft runner's replay (0.5.5) / execute (0.5.23); None when it has neither."""
    for name in ("execute", "replay"):
        fn = getattr(runner, name, None)
        if fn is not None:
            return fn(fb, None) if name == "execute" and "extend" in type(runner).__name__.lower() else fn(fb)
    return None


def run(tp_rank=0, iterations=3, batch=2, capture_bs=(), warmup=False):
    import torch
    from sglang.srt.model_executor.forward_batch_info import FLAVOR, ForwardBatch, ForwardMode
    from sglang.srt.model_executor.model_runner import ModelRunner
    from sglang.srt.speculative.eagle_draft_cuda_graph_runner import EAGLEDraftCudaGraphRunner
    from sglang.srt.speculative.eagle_draft_extend_cuda_graph_runner import EAGLEDraftExtendCudaGraphRunner

    target = ModelRunner(tp_rank=tp_rank)
    draft = ModelRunner(tp_rank=tp_rank, is_draft_worker=True)
    for r in (target, draft):  # ServerArgs.skip_server_warmup (SGLang's default: False)
        r.server_args.skip_server_warmup = not warmup

    class Worker:
        model_runner = draft

    draft_graph = EAGLEDraftCudaGraphRunner(Worker(), capture_bs=capture_bs)
    extend_graph = EAGLEDraftExtendCudaGraphRunner(Worker())
    sa = target.server_args
    steps, topk, ndt = sa.speculative_num_steps, sa.speculative_eagle_topk, sa.speculative_num_draft_tokens
    modes = ForwardMode.__members__
    draft_extend = modes["DRAFT_EXTEND"] if "DRAFT_EXTEND" in modes else modes.get("DRAFT_EXTEND_V2")

    def fb(mode, n_tokens):
        return ForwardBatch(mode, batch, torch.zeros(n_tokens, dtype=torch.long))

    if warmup:  # the server's own warm-up request (http_server._execute_server_warmup): bs 1, 8 tokens
        target.forward(ForwardBatch(ForwardMode.EXTEND, 1, torch.zeros(7, dtype=torch.long)))
        for _ in range(2):
            call_runner(draft_graph, ForwardBatch(ForwardMode.DECODE, 1, torch.zeros(topk, dtype=torch.long)))
            target.forward(ForwardBatch(ForwardMode.TARGET_VERIFY, 1, torch.zeros(ndt, dtype=torch.long)))
    target.forward(fb(ForwardMode.EXTEND, batch * 17))  # prefill
    for _ in range(iterations):
        target.forward(fb(ForwardMode.DECODE, batch))  # baseline decode step
        call_runner(draft_graph, fb(ForwardMode.DECODE, batch * topk))  # graph replay: steps - 1 forwards
        draft.forward(fb(ForwardMode.DECODE, batch * topk))  # an eager draft step
        target.forward(fb(ForwardMode.TARGET_VERIFY, batch * ndt))
        if draft_extend is not None:
            call_runner(extend_graph, fb(draft_extend, batch * (steps + 1)))
            draft.forward(fb(draft_extend, batch * (steps + 1)))
        target.forward(fb(ForwardMode.IDLE, 0))
        if FLAVOR == "broken":
            target.forward(fb(ForwardMode.QUANTUM_EXTEND, batch * 3))
    return FLAVOR


def run_scheduled(tp_rank=0, iterations=3, batch=2):
    """A prefill and ``iterations`` decode steps through the scheduler's event loop."""
    import os

    from sglang.srt.managers.scheduler import ScheduleBatch, Scheduler
    from sglang.srt.model_executor.forward_batch_info import ForwardMode
    from sglang.srt.model_executor.model_runner import ModelRunner

    speculative = os.environ.get("SGLANG_STANDIN_SPEC", "1") != "0"
    target = ModelRunner(tp_rank=tp_rank)
    draft = ModelRunner(tp_rank=tp_rank, is_draft_worker=True)
    for r in (target, draft):
        r.server_args.skip_server_warmup = True
        if not speculative:
            r.server_args.speculative_algorithm = None
    sched = Scheduler(target, draft if speculative else None)
    sched.queue = [ScheduleBatch(ForwardMode.EXTEND, batch)] + [ScheduleBatch(ForwardMode.DECODE, batch)
                                                                for _ in range(iterations)]
    sched.event_loop_normal()


def worker(tp_rank):
    import os

    if os.environ.get("SGLANG_STANDIN_LOOP") == "scheduler":
        run_scheduled(tp_rank)
    else:
        run(tp_rank)


if __name__ == "__main__":
    code = int(sys.argv[1]) if len(sys.argv) > 1 else 0
    tp = int(sys.argv[2]) if len(sys.argv) > 2 else 2
    ctx = mp.get_context("spawn")  # SGLang spawns its TP workers: fresh interpreters
    procs = [ctx.Process(target=worker, args=(k,)) for k in range(tp)]
    for p in procs:
        p.start()
    for p in procs:
        p.join()
    if any(p.exitcode != 0 for p in procs):
        sys.exit(99)
    print("standin server done", flush=True)
    sys.exit(code)
