"""SI in, milliseconds out: the one formatter predict, ingest and the report print with."""

from __future__ import annotations

from specmodel.units import ms


def test_ms_formats_seconds_as_milliseconds():
    assert ms(0.0301) == "30.10 ms"
    assert ms(0.0301, 3, unit=False) == "30.100"
    assert ms(2.5e-4) == "0.25 ms"
    assert ms(0.0) == "0.00 ms"


def test_alpha_beta_is_one_text_everywhere():
    from specmodel.units import alpha_beta, gb_per_s, us

    assert us(6.807e-6) == "6.81 us" and gb_per_s(2.5e10) == "25.00 GB/s" and gb_per_s(2.5e10, 1, unit=False) == "25.0"
    assert alpha_beta(6.807e-6, 2.5e10) == "alpha 6.81 us, beta 25.00 GB/s"
    assert alpha_beta(2.6e-6, 2.1e10, 3) == "alpha 2.600 us, beta 21.000 GB/s"


def test_no_module_formats_alpha_beta_by_hand():
    import re
    from pathlib import Path

    import specmodel

    pkg = Path(specmodel.__file__).parent
    by_hand = re.compile(r"alpha_s \* 1e6|beta_bytes_per_s / 1e9")
    hits = [str(p.relative_to(pkg)) for p in pkg.rglob("*.py") if by_hand.search(p.read_text())]
    assert hits == [], hits
