"""Stand-in for EAGLEDraftCudaGraphRunner: one replay = the whole multi-step draft.

With ``capture_bs`` it captures like SGLang does (0.5.5 ``capture_one_batch_size``, 0.5.23
``capture_one_shape`` -> ``backend.capture_one``): inside ``model_capture_mode()``, for each
batch size, ``run_once()`` (= ``eagle_worker.draft_forward``: steps - 1 eager
``ModelRunner.forward`` calls with dummy inputs) twice uncaptured, then once more under
capture. On a CPU there is no stream capture, so only SGLang's own flag tells these apart.
"""

import torch

from sglang.srt.model_executor.forward_batch_info import FLAVOR, ForwardBatch, ForwardMode

if FLAVOR == "0.5.23":
    from sglang.srt.model_executor.runner_utils.capture_mode import model_capture_mode
else:
    from sglang.srt.model_executor.cuda_graph_runner import model_capture_mode


class EAGLEDraftCudaGraphRunner:
    def __init__(self, eagle_worker, capture_bs=()):
        self.eagle_worker = eagle_worker
        self.model_runner = eagle_worker.model_runner
        self.topk = self.model_runner.server_args.speculative_eagle_topk
        self.speculative_num_steps = self.model_runner.server_args.speculative_num_steps
        self.num_tokens_per_bs = self.topk
        self.capture_bs = list(capture_bs)
        self.graphs = {}
        if self.capture_bs:
            with model_capture_mode():
                self.capture()

    def capture(self):
        for bs in self.capture_bs:
            fb = ForwardBatch(ForwardMode.DECODE, bs, torch.zeros(bs * self.topk, dtype=torch.long))

            def run_once(fb=fb):
                for _ in range(self.speculative_num_steps - 1):  # draft_forward: eager per-step forwards
                    self.model_runner.forward(fb)

            for _ in range(2):  # warm-up runs, outside stream capture
                run_once()
            if str(self.model_runner.device).startswith("cuda"):
                graph = torch.cuda.CUDAGraph()
                with torch.cuda.graph(graph):
                    run_once()
                self.graphs[bs] = graph
            else:
                run_once()  # the captured run (torch.cuda.graph on a GPU)

    def _run(self, forward_batch):
        graph = self.graphs.get(forward_batch.batch_size)
        if graph is not None:
            graph.replay()
            return None
        w = self.model_runner.weight
        x = w[: forward_batch.batch_size * self.topk]
        for _ in range(self.speculative_num_steps - 1):
            x = x @ w
        return x


if FLAVOR == "0.5.5":
    def replay(self, forward_batch):
        return self._run(forward_batch)

    EAGLEDraftCudaGraphRunner.replay = replay
elif FLAVOR == "0.5.23":
    def execute(self, forward_batch):
        return self._run(forward_batch)

    EAGLEDraftCudaGraphRunner.execute = execute
