"""Stand-in for SGLang 0.5.23 ``speculative/multi_layer_eagle_draft_extend_cuda_graph_runner.py``:
multi-layer EAGLE's draft-extend graphs, one per MTP layer (``MultiLayerEagleDraftExtendCudaGraphRunner.replay``
with the real signature), the composite runner the worker calls (``replay(step)``), and the single-graph
variant that replays every layer at step 0. A replay runs no ``ModelRunner.forward`` (as in SGLang)."""


class MultiLayerEagleDraftExtendCudaGraphRunner:
    def __init__(self, model_runner, step, captured_req_width):
        self.model_runner = model_runner
        self.step = step
        self.captured_req_width = captured_req_width
        self.raw_bs = 0
        self.bs = 0

    def replay(self, bs, seq_lens_sum, spec_info, seq_lens_cpu, *, out_cache_loc_virtual, kv_loc_plan, kv_loc_cols):
        self.bs = bs
        w = self.model_runner.weight
        return w[: bs * self.captured_req_width] @ w


class MultiLayerEagleMultiStepDraftExtendCudaGraphRunner:
    rotates_in_graph = False

    def __init__(self, model_runners, captured_req_width):
        self.runners = [MultiLayerEagleDraftExtendCudaGraphRunner(mr, i, captured_req_width)
                        for i, mr in enumerate(model_runners)]
        self.captured_req_width = captured_req_width
        self.raw_bs = self.bs = self.raw_num_tokens = 0

    def prepare(self, forward_batch, *, staged=False):
        self.raw_bs = forward_batch.batch_size
        self.bs = self.raw_bs + (self.raw_bs % 2)  # padded to an even bucket
        self.raw_num_tokens = self.raw_bs * self.captured_req_width

    def replay(self, step):
        runner = self.runners[step]
        runner.raw_bs = self.raw_bs
        return runner.replay(self.bs, None, None, None, out_cache_loc_virtual=None, kv_loc_plan=None,
                             kv_loc_cols=None)


class OneGraphMultiLayerEagleMultiStepDraftExtendCudaGraphRunner(MultiLayerEagleMultiStepDraftExtendCudaGraphRunner):
    rotates_in_graph = True

    def replay(self, step):
        if step == 0:
            x = None
            for r in self.runners:  # one graph holds every layer's forward
                w = r.model_runner.weight
                x = w[: self.bs * self.captured_req_width] @ w
            self._cached = {r.step: x for r in self.runners}
        return self._cached[step]
