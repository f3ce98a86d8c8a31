"""Cold start of `specmodel predict` (run interactively; target < 0.3 s on a 2-core machine).

Runs the installed command N times in fresh processes and prints the median wall time, and
checks that neither torch nor matplotlib is imported on that path.
Run: python benchmarks/bench_predict_cold_start.py [N]
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import time
from pathlib import Path

TARGET_S = 0.3


def main() -> int:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 15
    exe = Path(sys.executable).parent / "specmodel"
    cmd = [str(exe), "predict", "--accept-len", "3.2"]
    subprocess.run(cmd, check=True, capture_output=True)  # warm the OS page cache once
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        subprocess.run(cmd, check=True, capture_output=True)
        times.append(time.perf_counter() - t0)
    probe = subprocess.run(
        [sys.executable, "-c",
         "import sys; from specmodel.cli import main\n"
         "try:\n    main(['predict','--accept-len','3.2'])\nexcept SystemExit:\n    pass\n"
         "heavy=[m for m in ('torch','matplotlib','pandas','scipy') if m in sys.modules]\n"
         "print('HEAVY', ','.join(heavy))"],
        check=True, capture_output=True, text=True)
    heavy = probe.stdout.strip().splitlines()[-1].removeprefix("HEAVY").strip()
    med = statistics.median(times)
    print(f"specmodel predict cold start: median {med:.3f} s, min {min(times):.3f} s, max {max(times):.3f} s "
          f"over {n} runs (target < {TARGET_S} s): {'OK' if med < TARGET_S else 'OVER TARGET'}")
    print(f"heavy modules imported on the predict path: {heavy or 'none'}")
    return 0 if med < TARGET_S and not heavy else 1


if __name__ == "__main__":
    sys.exit(main())
