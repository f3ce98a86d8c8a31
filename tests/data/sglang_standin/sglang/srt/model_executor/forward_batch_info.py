"""Stand-in for sglang.srt.model_executor.forward_batch_info (member names per version)."""

import os
from enum import IntEnum, auto

FLAVOR = os.environ.get("SGLANG_STANDIN_FLAVOR", "0.5.5")

if FLAVOR == "0.5.5":

    class ForwardMode(IntEnum):
        EXTEND = auto()
        DECODE = auto()
        MIXED = auto()
        IDLE = auto()
        TARGET_VERIFY = auto()
        DRAFT_EXTEND = auto()
        DRAFT_EXTEND_V2 = auto()
        SPLIT_PREFILL = auto()

elif FLAVOR == "0.5.23":

    class ForwardMode(IntEnum):  # type: ignore[no-redef]
        EXTEND = auto()
        DECODE = auto()
        MIXED = auto()
        IDLE = auto()
        TARGET_VERIFY = auto()
        DRAFT_EXTEND_V2 = auto()
        PREBUILT = auto()
        SPLIT_PREFILL = auto()
        DLLM_EXTEND = auto()

else:

    class ForwardMode(IntEnum):  # type: ignore[no-redef]
        DECODE = auto()
        TARGET_VERIFY = auto()
        EXTEND = auto()
        QUANTUM_EXTEND = auto()  # a member no specmodel version knows
        IDLE = auto()


class ForwardBatch:
    def __init__(self, forward_mode, batch_size, input_ids, positions=None):
        self.forward_mode = forward_mode
        self.batch_size = batch_size
        self.input_ids = input_ids
        self.positions = positions
        self.out_cache_loc = input_ids
