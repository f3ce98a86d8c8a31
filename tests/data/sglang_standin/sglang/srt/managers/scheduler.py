"""Stand-in for sglang.srt.managers.scheduler.Scheduler: the normal event loop's shape (0.5.5
``event_loop_normal``: recv_requests -> process_input_requests -> get_next_batch_to_run ->
run_batch -> process_batch_result) with an EAGLE worker's cycle inside ``run_batch`` (draft
forwards, tree building, verify, verify bookkeeping, draft-extend; 0.5.5
``EAGLEWorker.forward_batch_generation``). ``host_work(what)`` is called wherever SGLang works on
the host: a test's fake clock advances there; ``ModelRunner.on_forward`` does the same inside
each forward. The loop ends after one idle pass once its queue is empty. The "broken" flavour
renames ``get_next_batch_to_run`` (a version the hook cannot bound steps in).
"""

import torch

from sglang.srt.model_executor.forward_batch_info import FLAVOR, ForwardBatch, ForwardMode


class Req:
    pass


class ScheduleBatch:
    def __init__(self, forward_mode, n_reqs):
        self.forward_mode = forward_mode
        self.reqs = [Req() for _ in range(n_reqs)]

    def batch_size(self):
        return len(self.reqs)


class SchedulerDisaggregationDecodeMixin:
    """PD disaggregation's decode server (0.5.5 and 0.5.23 ``disaggregation/decode.py``): its loop
    calls ``get_next_disagg_decode_batch_to_run``, never ``get_next_batch_to_run``."""

    def event_loop_normal_disagg_decode(self):
        while True:
            self.process_input_requests(self.recv_requests())
            if FLAVOR == "0.5.23":
                batch = self.get_next_disagg_decode_batch_to_run(running_batch=None).batch_to_run
            else:
                batch = self.get_next_disagg_decode_batch_to_run()
            if batch:
                self.process_batch_result(batch, self.run_batch(batch))
            elif not self.queue:
                return
            self.last_batch = batch


class SchedulerDisaggregationPrefillMixin:
    """PD disaggregation's prefill server: 0.5.23 calls ``get_next_disagg_prefill_batch_to_run``;
    0.5.5 calls ``get_new_batch_prefill`` directly (no seam bounds its steps)."""

    def event_loop_normal_disagg_prefill(self):
        while True:
            self.process_input_requests(self.recv_requests())
            if FLAVOR == "0.5.23":
                batch = self.get_next_disagg_prefill_batch_to_run(running_batch=None,
                                                                   last_batch=self.last_batch).batch_to_run
            else:
                batch = self.get_new_batch_prefill()
            if batch:
                self.process_batch_result(batch, self.run_batch(batch))
            elif not self.queue:
                return
            self.last_batch = batch


class NextBatchPlan:
    def __init__(self, batch_to_run):
        self.batch_to_run = batch_to_run


class Scheduler(SchedulerDisaggregationDecodeMixin, SchedulerDisaggregationPrefillMixin):
    def __init__(self, target, draft=None, host_work=None, device="cpu"):
        self.target = target
        self.draft = draft  # None: a server without speculation
        self.host_work = host_work or (lambda what: None)
        self.device = device
        self.enable_overlap = False
        self.queue = []
        self.last_batch = None

    def recv_requests(self):
        self.host_work("recv")
        return []

    def process_input_requests(self, recv_reqs):
        pass

    def _next_batch(self):
        self.host_work("schedule")
        return self.queue.pop(0) if self.queue else None

    def run_batch(self, batch):
        self.host_work("prepare")
        bs = batch.batch_size()

        def fb(mode, n):
            return ForwardBatch(mode, bs, torch.zeros(n, dtype=torch.long))

        sa = self.target.server_args
        if batch.forward_mode == ForwardMode.EXTEND or self.draft is None:
            n = bs * 16 if batch.forward_mode == ForwardMode.EXTEND else bs
            return self.target.forward(fb(batch.forward_mode, n))
        for _ in range(sa.speculative_num_steps - 1):
            self.draft.forward(fb(ForwardMode.DECODE, bs * sa.speculative_eagle_topk))
        self.host_work("build_tree")
        out = self.target.forward(fb(ForwardMode.TARGET_VERIFY, bs * sa.speculative_num_draft_tokens))
        self.host_work("verify_bookkeeping")
        modes = ForwardMode.__members__
        extend = modes["DRAFT_EXTEND"] if "DRAFT_EXTEND" in modes else modes.get("DRAFT_EXTEND_V2")
        if extend is not None:
            self.draft.forward(fb(extend, bs * (sa.speculative_num_steps + 1)))
        return out

    def process_batch_result(self, batch, result):
        self.host_work("process")

    def self_check_during_idle(self):
        pass

    def event_loop_normal(self):
        while True:
            recv_reqs = self.recv_requests()
            self.process_input_requests(recv_reqs)
            batch = self.plan_next_batch() if FLAVOR == "broken" else self.get_next_batch_to_run()
            if batch:
                result = self.run_batch(batch)
                self.process_batch_result(batch, result)
            else:
                self.self_check_during_idle()
                if not self.queue:
                    return
            self.last_batch = batch


if FLAVOR == "broken":
    Scheduler.plan_next_batch = Scheduler._next_batch
else:
    Scheduler.get_next_batch_to_run = Scheduler._next_batch
if FLAVOR == "0.5.23":
    SchedulerDisaggregationDecodeMixin.get_next_disagg_decode_batch_to_run = \
        lambda self, running_batch: NextBatchPlan(self._next_batch())
    SchedulerDisaggregationPrefillMixin.get_next_disagg_prefill_batch_to_run = \
        lambda self, running_batch, last_batch, should_retry_storage_prefetch=True: NextBatchPlan(self._next_batch())
elif FLAVOR == "0.5.5":
    SchedulerDisaggregationDecodeMixin.get_next_disagg_decode_batch_to_run = lambda self: self._next_batch()
    SchedulerDisaggregationPrefillMixin.get_new_batch_prefill = lambda self: self._next_batch()
