"""Directory that ``specmodel sglang`` and ``specmodel vllm`` put first on ``PYTHONPATH``: its
``sitecustomize`` installs the engine's hook in every Python process the server starts (TP workers included)."""

from pathlib import Path

SHIM_DIR = Path(__file__).resolve().parent
