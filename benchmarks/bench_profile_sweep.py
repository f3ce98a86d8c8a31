"""Wall time of the default sweep: ``specmodel profile --tp 8`` on this machine (target: about two
minutes on 2 cores — 150 s), start to finish including rank start-up and writing the profile.
Run: python benchmarks/bench_profile_sweep.py [TP]
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TARGET_S = 150.0


def main() -> int:
    tp = sys.argv[1] if len(sys.argv) > 1 else "8"
    exe = Path(sys.executable).parent / "specmodel"
    out = Path(tempfile.mkdtemp(prefix="specmodel-bench-"))
    try:
        t0 = time.perf_counter()
        r = subprocess.run([str(exe), "profile", "--tp", tp, "--name", "bench", "--out-dir", str(out), "--quiet"],
                           capture_output=True, text=True)
        wall = time.perf_counter() - t0
        if r.returncode != 0:
            print(f"specmodel profile --tp {tp} failed (exit {r.returncode}): {r.stderr.strip()[-500:]}")
            return 1
        rows = sum(1 for _ in (out / "bench" / "costs.csv").open()) - 1
        print(f"default sweep `specmodel profile --tp {tp}`: {wall:.1f} s wall ({rows} cost rows; target "
              f"< {TARGET_S:.0f} s): {'OK' if wall < TARGET_S else 'OVER TARGET'}")
        return 0 if wall < TARGET_S else 1
    finally:
        shutil.rmtree(out, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
