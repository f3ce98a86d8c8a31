import os

__version__ = "0.0.0+standin-" + os.environ.get("SGLANG_STANDIN_FLAVOR", "0.5.5")
