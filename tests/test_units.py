"""SI in, milliseconds out: the one formatter predict, ingest and the report print with."""

from __future__ import annotations

from specmodel.units import ms


def test_ms_formats_seconds_as_milliseconds():
    assert ms(0.0301) == "30.10 ms"
    assert ms(0.0301, 3, unit=False) == "30.100"
    assert ms(2.5e-4) == "0.25 ms"
    assert ms(0.0) == "0.00 ms"
