"""Stand-in for EAGLEDraftExtendCudaGraphRunner (replay in 0.5.5, execute in 0.5.23)."""

from sglang.srt.model_executor.forward_batch_info import FLAVOR


class EAGLEDraftExtendCudaGraphRunner:
    def __init__(self, eagle_worker):
        self.eagle_worker = eagle_worker
        self.model_runner = eagle_worker.model_runner
        self.num_tokens_per_bs = self.model_runner.server_args.speculative_num_steps + 1

    def _run(self, forward_batch):
        w = self.model_runner.weight
        return w[: forward_batch.input_ids.shape[0]] @ w


if FLAVOR == "0.5.5":
    def replay(self, forward_batch):
        return self._run(forward_batch)

    EAGLEDraftExtendCudaGraphRunner.replay = replay
elif FLAVOR == "0.5.23":
    def execute(self, forward_batch, select_index):
        return self._run(forward_batch)

    EAGLEDraftExtendCudaGraphRunner.execute = execute
