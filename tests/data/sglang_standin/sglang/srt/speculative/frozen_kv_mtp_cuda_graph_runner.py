"""Stand-in for SGLang 0.5.23 ``speculative/frozen_kv_mtp_cuda_graph_runner.py``: the whole
FROZEN_KV_MTP draft (seed forward + steps - 1 recurrent forwards over batch x topk rows) in one graph;
``execute(forward_batch)`` gets the batch already expanded to batch x topk when topk > 1."""


class FrozenKVMTPCudaGraphRunner:
    def __init__(self, frozen_kv_mtp_worker):
        self.frozen_kv_mtp_worker = frozen_kv_mtp_worker
        self.model_runner = frozen_kv_mtp_worker.draft_model_runner
        sa = self.model_runner.server_args
        self.speculative_num_steps = sa.speculative_num_steps
        self.topk = sa.speculative_eagle_topk
        self.captured_req_width = self.topk

    def execute(self, forward_batch):
        w = self.model_runner.weight
        x = w[: forward_batch.batch_size]
        for _ in range(self.speculative_num_steps):
            x = x @ w
        return x, x, x
