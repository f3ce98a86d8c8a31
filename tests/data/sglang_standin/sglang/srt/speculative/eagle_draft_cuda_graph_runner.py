"""Stand-in for EAGLEDraftCudaGraphRunner: one replay = the whole multi-step draft."""

from sglang.srt.model_executor.forward_batch_info import FLAVOR


class EAGLEDraftCudaGraphRunner:
    def __init__(self, eagle_worker):
        self.eagle_worker = eagle_worker
        self.model_runner = eagle_worker.model_runner
        self.topk = self.model_runner.server_args.speculative_eagle_topk
        self.speculative_num_steps = self.model_runner.server_args.speculative_num_steps
        self.num_tokens_per_bs = self.topk

    def _run(self, forward_batch):
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
