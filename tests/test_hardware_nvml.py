"""NVML topology maps CUDA devices to NVML devices through their UUID.

NVML numbers GPUs in PCI order and ignores ``CUDA_VISIBLE_DEVICES``: with
``CUDA_VISIBLE_DEVICES=2,3`` CUDA device 0 is NVML device 2. The fake module below has the
calls and calling conventions of nvidia-ml-py 13 (``pynvml.py``): handles are opaque objects,
``nvmlDeviceGetHandleByUUID`` takes the ``GPU-…`` string, unknown UUIDs raise ``NVMLError``.
"""

from __future__ import annotations

import sys
import types
from typing import Any

import pytest

from specmodel.profile import hardware


class NVMLError(Exception):
    pass


class _Handle:  # c_nvmlDevice_t stand-in
    def __init__(self, idx: int) -> None:
        self.idx = idx


def fake_pynvml(names: list[str], pcie_gen: list[int]) -> types.ModuleType:
    m = types.ModuleType("pynvml")
    uuids = [f"GPU-0000000{i}-aaaa-bbbb-cccc-dddddddddddd" for i in range(len(names))]
    m.NVMLError = NVMLError  # type: ignore[attr-defined]
    m.NVML_NVLINK_MAX_LINKS = 18  # type: ignore[attr-defined]
    m.NVML_FEATURE_ENABLED = 1  # type: ignore[attr-defined]
    m.NVML_TOPOLOGY_SYSTEM = 50  # type: ignore[attr-defined]
    m.NVML_TOPOLOGY_HOSTBRIDGE = 30  # type: ignore[attr-defined]
    m.uuids = uuids  # type: ignore[attr-defined]

    def by_index(i: int) -> _Handle:
        if not 0 <= i < len(names):
            raise NVMLError("Invalid Argument")
        return _Handle(i)

    def by_uuid(u: Any) -> _Handle:
        u = u.decode() if isinstance(u, bytes) else u  # convertStrBytes accepts both
        if u not in uuids:
            raise NVMLError("Not Found")
        return _Handle(uuids.index(u))

    def nvlink_state(h: _Handle, link: int) -> int:
        raise NVMLError("Not Supported")  # PCIe cards

    fns = {
        "nvmlInit": lambda: None, "nvmlShutdown": lambda: None,
        "nvmlSystemGetDriverVersion": lambda: "580.95.05",
        "nvmlDeviceGetHandleByIndex": by_index, "nvmlDeviceGetHandleByUUID": by_uuid,
        "nvmlDeviceGetName": lambda h: names[h.idx], "nvmlDeviceGetUUID": lambda h: uuids[h.idx],
        "nvmlDeviceGetCurrPcieLinkGeneration": lambda h: pcie_gen[h.idx],
        "nvmlDeviceGetNvLinkState": nvlink_state,
        "nvmlDeviceGetTopologyCommonAncestor": lambda a, b: 50 if {a.idx, b.idx} == {2, 3} else 30,
    }
    for k, v in fns.items():
        setattr(m, k, v)
    return m


@pytest.fixture
def nvml(monkeypatch: pytest.MonkeyPatch) -> types.ModuleType:
    mod = fake_pynvml(["GPU zero", "GPU one", "GPU two", "GPU three"], [3, 3, 5, 4])
    monkeypatch.setitem(sys.modules, "pynvml", mod)
    return mod


def test_visible_devices_are_found_by_uuid(nvml: types.ModuleType, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,3")
    # what torch reports for cuda:0 / cuda:1 under that variable: NVML devices 2 and 3
    topo = hardware._nvml([0, 1], [nvml.uuids[2], nvml.uuids[3]])  # type: ignore[attr-defined]
    assert topo["available"] and "error" not in topo
    assert [g["name"] for g in topo["gpus"]] == ["GPU two", "GPU three"]
    assert [g["pcie_gen"] for g in topo["gpus"]] == [5, 4]
    assert [g["index"] for g in topo["gpus"]] == [0, 1]  # still named by the CUDA index
    assert topo["pairs"][0]["topology"] == "system"  # the pair (2, 3), not (0, 1)


def test_uuids_in_the_variable_are_used_without_torch(nvml: types.ModuleType,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", f"{nvml.uuids[3]},{nvml.uuids[1]}")  # type: ignore[attr-defined]
    topo = hardware._nvml([0, 1], [None, None])
    assert [g["name"] for g in topo["gpus"]] == ["GPU three", "GPU one"]


def test_pci_ordered_indices_map_through_the_variable(nvml: types.ModuleType,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1,2")
    monkeypatch.setenv("CUDA_DEVICE_ORDER", "PCI_BUS_ID")
    topo = hardware._nvml([0, 1], [None, None])
    assert [g["name"] for g in topo["gpus"]] == ["GPU one", "GPU two"]
    # without a UUID and without PCI order nothing ties the two numberings: say so
    monkeypatch.delenv("CUDA_DEVICE_ORDER")
    topo = hardware._nvml([0], [None])
    assert topo["gpus"][0]["nvml_lookup"].startswith("index (unverified")


def test_an_unknown_uuid_is_reported_not_raised(nvml: types.ModuleType) -> None:
    topo = hardware._nvml([0], ["GPU-ffffffff-0000-0000-0000-000000000000"])
    assert topo["available"] and "Not Found" in topo["error"]
