"""Run every benchmarks/bench_*.py in turn and print their figures (the README's bench command)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


def main() -> int:
    here = Path(__file__).resolve().parent
    failed = []
    for script in sorted(here.glob("bench_*.py")):
        print(f"== {script.name}", flush=True)
        r = subprocess.run([sys.executable, str(script)], cwd=here.parent)
        if r.returncode != 0:
            failed.append(script.name)
    if failed:
        print(f"benchmarks missing their target or failing: {', '.join(failed)}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
