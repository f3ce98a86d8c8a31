"""Reading traces: Kineto traces (ingest, attribution), the collectives table, nccl-tests output, sweeps."""
