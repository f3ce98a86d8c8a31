"""Directory that ``specmodel sglang`` puts first on ``PYTHONPATH``: its ``sitecustomize``
installs the SGLang hook in every Python process the server starts (TP workers included)."""

from pathlib import Path

SHIM_DIR = Path(__file__).resolve().parent
