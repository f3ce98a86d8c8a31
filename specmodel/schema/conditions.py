"""The box's condition while a server was recorded (profile v5, ``conditions``): the engine hooks'
calibration probe pooled per server, so two servers recorded on a box in different states are told
apart before their costs are compared."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from specmodel.errors import SpecmodelError
from specmodel.schema.fields import at_record, read_int, read_num

#: The profile version that added ``conditions``.
CONDITIONS_VERSION = 5


@dataclass(frozen=True, kw_only=True)
class ServerCondition:
    """One server's box condition over its recording (profile v5, in ``conditions``): the engine
    hooks' calibration probe (:mod:`specmodel.engines.hook.calibration`) pooled over every probe of every
    rank.

    * ``probe``: what was timed (kernel, size, repetitions, device, clock); two servers compare only
      under one probe;
    * ``probe_s`` / ``probe_iqr_s`` / ``samples``: the median seconds of one sample, its
      interquartile range and the samples pooled (``probes`` probes of a few samples each);
    * ``wait_share``: the share of the step thread's runnable time it waited for a CPU (time-sharing
      the short probe does not see), ``others_share`` / ``others_iqr`` / ``intervals``: the median
      demand of processes outside the server for the box's CPUs (runnable threads per core: 1 =
      one per core on average) over the window of steps before each probe, its IQR and the windows pooled (None / 0: never readable, or a
      recording of one probe; a CPU engine's yardstick: :func:`specmodel.model.boxcheck.check_condition`), ``load_1m``, ``cpu_freq_hz``, ``sm_clock_hz``: medians over
      the probes that read them (None: never readable); ``throttled_probes``: probes during which
      NVML named a slowdown.
    """

    probe: str
    probe_s: float
    probe_iqr_s: float
    samples: int
    probes: int
    wait_share: float | None = None
    others_share: float | None = None
    others_iqr: float = 0.0
    intervals: int = 0
    load_1m: float | None = None
    cpu_freq_hz: float | None = None
    sm_clock_hz: float | None = None
    throttled_probes: int = 0

    def __post_init__(self) -> None:
        w = "profile: conditions"
        if not isinstance(self.probe, str) or not self.probe:
            raise SpecmodelError(f"{w}: probe: expected a non-empty string, got {self.probe!r}")
        for name in ("samples", "probes", "throttled_probes", "intervals"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                raise SpecmodelError(f"{w}: {name}: expected an integer >= 0, got {v!r}")
        if self.samples < 1 or self.probes < 1 or self.throttled_probes > self.probes:
            raise SpecmodelError(f"{w}: samples and probes must be >= 1 and throttled_probes <= probes, got "
                                 f"{self.samples}, {self.probes}, {self.throttled_probes}")
        for name, hi, optional in (("probe_s", 1e3, False), ("probe_iqr_s", 1e3, False), ("wait_share", 1.0, True),
                                   ("others_share", 1e3, True), ("others_iqr", 1e3, False),
                                   ("load_1m", 1e6, True),
                                   ("cpu_freq_hz", 1e12, True), ("sm_clock_hz", 1e12, True)):
            v = getattr(self, name)
            if v is None and optional:
                continue
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or not 0.0 <= v <= hi:
                raise SpecmodelError(f"{w}: {name}: expected a number in 0..{hi:g}" + (" or null" if optional else "")
                                     + f", got {v!r}")
        if (self.others_share is None) != (self.intervals == 0):
            raise SpecmodelError(f"{w}: others_share and intervals: both known or both absent, got "
                                 f"{self.others_share!r} over {self.intervals} window(s)")
        if self.probe_s <= 0:
            raise SpecmodelError(f"{w}: probe_s: must be > 0, got {self.probe_s!r}")

    @classmethod
    def from_dict(cls, d: Any, where: str) -> ServerCondition:
        if not isinstance(d, Mapping):
            raise SpecmodelError(f"{where}: expected an object")
        probe = d.get("probe")
        if not isinstance(probe, str):
            raise SpecmodelError(f"{where}: probe: expected a string, got {probe!r}")

        def opt(key: str) -> float | None:
            return None if d.get(key) is None else read_num(d, key, where)

        try:
            return cls(probe=probe, probe_s=read_num(d, "probe_s", where, strict=True),
                       probe_iqr_s=read_num(d, "probe_iqr_s", where), samples=read_int(d, "samples", where, minimum=1),
                       probes=read_int(d, "probes", where, minimum=1), wait_share=opt("wait_share"),
                       others_share=opt("others_share"),
                       others_iqr=0.0 if d.get("others_iqr") is None else read_num(d, "others_iqr", where),
                       intervals=read_int(d, "intervals", where, optional=True),
                       load_1m=opt("load_1m"),
                       cpu_freq_hz=opt("cpu_freq_hz"), sm_clock_hz=opt("sm_clock_hz"),
                       throttled_probes=read_int(d, "throttled_probes", where, optional=True))
        except SpecmodelError as exc:
            raise at_record(exc, where, "profile: conditions: ") from None

    @property
    def effective_s(self) -> float:
        """The probe's seconds stretched by the time the worker waited for a CPU (time-sharing the
        short probe itself does not see): ``probe_s / (1 - wait_share)``; ``probe_s`` unknown it."""
        return self.probe_s / (1.0 - min(self.wait_share, 0.99)) if self.wait_share is not None else self.probe_s

    def to_dict(self) -> dict[str, Any]:
        # the others' share only where measured: a condition without it writes what older readers wrote
        others = {"others_share": self.others_share, "others_iqr": self.others_iqr, "intervals": self.intervals} \
            if self.others_share is not None else {}
        return {"probe": self.probe, "probe_s": self.probe_s, "probe_iqr_s": self.probe_iqr_s,
                "samples": self.samples, "probes": self.probes, "wait_share": self.wait_share, **others,
                "load_1m": self.load_1m,
                "cpu_freq_hz": self.cpu_freq_hz, "sm_clock_hz": self.sm_clock_hz,
                "throttled_probes": self.throttled_probes}


@dataclass(frozen=True, kw_only=True)
class Conditions:
    """The box's condition while each server was recorded (profile v5, ``conditions``; written by
    ``--summarize`` from the hooks' probes): ``baseline`` (the server without speculation) and
    ``spec`` (the speculative server), each None when its logs hold no probe."""

    baseline: ServerCondition | None = None
    spec: ServerCondition | None = None

    def __post_init__(self) -> None:
        for name in ("baseline", "spec"):
            v = getattr(self, name)
            if v is not None and not isinstance(v, ServerCondition):
                raise SpecmodelError(f"profile: conditions: {name}: expected a server condition, got {v!r}")

    @classmethod
    def from_dict(cls, d: Any, where: str) -> Conditions:
        if not isinstance(d, Mapping):
            raise SpecmodelError(f"{where}: expected an object")
        return cls(**{k: None if d.get(k) is None else ServerCondition.from_dict(d[k], f"{where}: {k}")
                      for k in ("baseline", "spec")})

    def to_dict(self) -> dict[str, Any]:
        return {k: None if getattr(self, k) is None else getattr(self, k).to_dict() for k in ("baseline", "spec")}
