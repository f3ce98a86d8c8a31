"""`predict` runs on a laptop without torch: its import path must stay free of heavy modules."""

from __future__ import annotations

from tests.conftest import run_python


def test_predict_path_imports_no_torch_matplotlib_pandas():
    code = (
        "import sys\nfrom specmodel.cli import main\n"
        "try:\n    main(['predict','--accept-len','3.2'])\nexcept SystemExit as e:\n    assert not e.code, e.code\n"
        "print(sorted(m for m in ('torch','matplotlib','pandas','scipy') if m in sys.modules))"
    )
    r = run_python(code)
    assert r.stdout.strip().splitlines()[-1] == "[]"
