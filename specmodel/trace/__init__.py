"""Reading the real world: Kineto traces, server logs, nccl-tests output."""
