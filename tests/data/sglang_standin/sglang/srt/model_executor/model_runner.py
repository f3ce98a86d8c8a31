"""Stand-in for sglang.srt.model_executor.model_runner.ModelRunner (CPU, a matmul per forward)."""

import torch

from sglang.srt.model_executor.forward_batch_info import FLAVOR, ForwardBatch


class ServerArgs:
    model_path = "standin/model"
    speculative_algorithm = "EAGLE3"
    speculative_draft_model_path = "standin/drafter"
    speculative_num_steps = 3
    speculative_eagle_topk = 1
    speculative_num_draft_tokens = 4
    tp_size = 2
    skip_server_warmup = False
    disaggregation_mode = "null"


class ModelRunnerOutput:
    def __init__(self, logits_output, can_run_graph):
        self.logits_output = logits_output
        self.can_run_graph = can_run_graph


class ModelRunner:
    #: a test's hook, called with the ForwardBatch as each forward starts (a fake clock advances)
    on_forward = None

    def __init__(self, tp_rank=0, is_draft_worker=False, hidden=64, device="cpu"):
        self.device = device
        self.tp_rank = tp_rank
        self.tp_size = 2
        self.is_draft_worker = is_draft_worker
        self.server_args = ServerArgs()
        self.weight = torch.randn(hidden, hidden, device=device)
        self.forward_pass_id = 0

    def forward(
        self,
        forward_batch: ForwardBatch,
        skip_attn_backend_init: bool = False,
        pp_proxy_tensors=None,
        reinit_attn_backend: bool = False,
        split_forward_count: int = 1,
    ):
        """Stand-in forward docstring."""
        self.forward_pass_id += 1
        if ModelRunner.on_forward is not None:
            ModelRunner.on_forward(self, forward_batch)
        n = forward_batch.input_ids.numel()
        out = torch.randn(n, self.weight.shape[0], device=self.weight.device) @ self.weight
        if FLAVOR == "0.5.5":
            return out, False
        return ModelRunnerOutput(out, False)
