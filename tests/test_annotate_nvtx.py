"""NVTX at the annotation seam: with the ``nvtx`` package, ranges in the ``specmodel`` domain, one
colour per phase, (batch, tokens) as the payload; without it, ``torch.cuda.nvtx`` as before.

No GPU here, so torch is a stand-in that says CUDA is available, and ``nvtx`` a stand-in with the
real package's API (nvtx 0.2.17: ``get_domain(name)`` -> ``Domain`` with
``get_event_attributes(message, color, category, payload)``, ``push_range(attributes)``,
``pop_range()``; colours are ARGB ints or names matplotlib resolves; ``DummyDomain`` when no
tool is attached). The real package, when installed, is exercised too (no tool attached: its
no-op domain).
"""

from __future__ import annotations

import importlib.util
import sys
import types
import warnings
from typing import Any

import numpy as np
import pytest

from specmodel.engines.hook import annotate
from specmodel.engines.hook.annotate import NVTX_DOMAIN, PHASE_COLORS, phase
from specmodel.schema.phases import PHASES, phase_label


class FakeEventAttributes:
    def __init__(self, message: str | None, color: Any, category: int, payload: Any) -> None:
        self.message, self.color, self.category, self.payload = message, color, category, payload


class FakeDomain:
    """nvtx._lib.lib.Domain: registered strings and categories, a range stack per domain."""

    def __init__(self, name: str, log: list[tuple[str, ...]]) -> None:
        self.name = name
        self.categories: dict[str, int] = {}
        self.log = log
        self.stack: list[FakeEventAttributes] = []

    def get_category_id(self, name: str) -> int:
        return self.categories.setdefault(name, len(self.categories) + 1)

    def get_event_attributes(self, message: str | None = None, color: Any = None, category: Any = None,
                             payload: Any = None) -> FakeEventAttributes:
        if color is not None and not isinstance(color, int) and color not in ("blue", "green", "red"):
            raise TypeError(f"Invalid color {color}. Please install matplotlib for additional colors support")
        if payload is not None and not isinstance(payload, (int, float, np.ndarray, list, tuple, range, bytes)):
            warnings.warn(f"Unsupported payload type: {type(payload)}.", stacklevel=2)
        cat = self.get_category_id(category) if isinstance(category, str) else (category or 0)
        return FakeEventAttributes(message, color, cat, payload)

    def push_range(self, attributes: FakeEventAttributes | None = None, **kwargs: Any) -> None:
        attrs = attributes if attributes is not None else self.get_event_attributes(**kwargs)
        self.stack.append(attrs)
        self.log.append(("push", self.name, str(attrs.message)))

    def pop_range(self) -> None:
        attrs = self.stack.pop()
        self.log.append(("pop", self.name, str(attrs.message)))


def fake_nvtx_module(log: list[tuple[str, ...]]) -> types.ModuleType:
    mod = types.ModuleType("nvtx")
    domains: dict[str | None, FakeDomain] = {}

    def get_domain(name: str | None = None) -> FakeDomain:
        return domains.setdefault(name, FakeDomain(name or "NVTX", log))

    def push_range(message: str | None = None, color: Any = "blue", domain: str | None = None,
                   category: Any = None, payload: Any = None) -> None:
        get_domain(domain).push_range(message=message, color=color, category=category, payload=payload)

    def pop_range(domain: str | None = None) -> None:
        get_domain(domain).pop_range()

    mod.get_domain = get_domain  # type: ignore[attr-defined]
    mod.push_range = push_range  # type: ignore[attr-defined]
    mod.pop_range = pop_range  # type: ignore[attr-defined]
    mod.domains = domains  # type: ignore[attr-defined]
    return mod


def fake_torch(log: list[tuple[str, ...]], *, cuda: bool = True) -> Any:
    nvtx = types.SimpleNamespace(range_push=lambda msg: log.append(("torch.push", msg)),
                                 range_pop=lambda: log.append(("torch.pop",)))
    return types.SimpleNamespace(
        cuda=types.SimpleNamespace(is_available=lambda: cuda, nvtx=nvtx),
        _C=types.SimpleNamespace(_autograd=types.SimpleNamespace(_profiler_enabled=lambda: False)),
    )


@pytest.fixture
def seam(monkeypatch):
    """(log, install_nvtx): a CUDA-capable stand-in torch; ``install_nvtx(None)`` hides the package."""
    log: list[tuple[str, ...]] = []

    def install(module: types.ModuleType | None, *, cuda: bool = True) -> None:
        monkeypatch.setitem(sys.modules, "nvtx", module)  # None: `import nvtx` raises ImportError
        monkeypatch.setattr(annotate, "_torch", lambda: fake_torch(log, cuda=cuda))
        annotate._nvtx_package.cache_clear()
        annotate._nvtx_range.cache_clear()

    yield log, install
    annotate._nvtx_package.cache_clear()
    annotate._nvtx_range.cache_clear()


def test_nvtx_package_range_in_specmodel_domain_with_colour_category_and_payload(seam):
    log, install = seam
    mod = fake_nvtx_module(log)
    install(mod)
    label = phase_label("verify", 2, 8)
    with phase(label):
        log.append(("body",))
    assert log == [("push", NVTX_DOMAIN, label), ("body",), ("pop", NVTX_DOMAIN, label)]
    dom = mod.domains[NVTX_DOMAIN]
    attrs = annotate._nvtx_range(label)[1]
    assert attrs.color == PHASE_COLORS["verify"]
    assert dom.categories == {"verify": attrs.category}
    assert attrs.payload.dtype.names == ("batch", "tokens")
    assert (int(attrs.payload["batch"]), int(attrs.payload["tokens"])) == (2, 8)
    assert None not in mod.domains, "nothing goes to the default NVTX domain"


def test_each_phase_its_own_colour_and_range_popped_on_error(seam):
    log, install = seam
    mod = fake_nvtx_module(log)
    install(mod)
    assert set(PHASE_COLORS) == set(PHASES)
    assert len(set(PHASE_COLORS.values())) == len(PHASES)
    seen = {}
    for kind in ("decode", "verify", "draft", "draft_extend"):
        label = phase_label(kind, 4, 4)
        with pytest.raises(RuntimeError), phase(label):
            raise RuntimeError("forward failed")
        seen[kind] = annotate._nvtx_range(label)[1].color
    assert len(set(seen.values())) == 4
    assert mod.domains[NVTX_DOMAIN].stack == []
    assert [e[0] for e in log] == ["push", "pop"] * 4


def test_a_label_that_is_not_a_phase_gets_the_neutral_colour_and_no_payload(seam):
    log, install = seam
    install(fake_nvtx_module(log))
    with phase("specmodel.warmup"):
        pass
    attrs = annotate._nvtx_range("specmodel.warmup")[1]
    assert attrs.payload is None and attrs.category == 0
    assert attrs.color not in PHASE_COLORS.values()


def test_without_the_package_torch_cuda_nvtx_as_before(seam):
    log, install = seam
    install(None)
    label = phase_label("draft", 1, 1)
    with phase(label):
        pass
    assert log == [("torch.push", label), ("torch.pop",)]


def test_no_cuda_no_nvtx_and_nvtx_false_honoured(seam):
    log, install = seam
    install(fake_nvtx_module(log), cuda=False)
    with phase(phase_label("decode", 1, 1)):
        pass
    install(fake_nvtx_module(log))
    with phase(phase_label("decode", 1, 1), nvtx=False):
        pass
    assert log == []


@pytest.mark.skipif(importlib.util.find_spec("nvtx") is None, reason="the nvtx package is not installed")
def test_real_nvtx_package_accepts_our_calls(monkeypatch):
    """The real package (no profiler attached: its no-op domain) takes the calls the seam makes."""
    log: list[tuple[str, ...]] = []
    monkeypatch.setattr(annotate, "_torch", lambda: fake_torch(log))
    annotate._nvtx_package.cache_clear()
    annotate._nvtx_range.cache_clear()
    try:
        import nvtx

        assert annotate._nvtx_package() is nvtx
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            for kind in PHASES:
                with phase(phase_label(kind, 3, 12)):
                    pass
            with phase("not-a-phase"):
                pass
        assert log == [], "torch.cuda.nvtx is not used when the package is there"
    finally:
        annotate._nvtx_package.cache_clear()
        annotate._nvtx_range.cache_clear()
