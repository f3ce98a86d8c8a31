"""Hardware and software metadata for the profile: CPU/GPU names, GPU count, NVML topology
(NVLink vs PCIe, P2P status per pair, PCIe generation/width), driver, NCCL/torch versions.

Everything optional degrades to a field saying why it is missing; nothing here raises.
"""

from __future__ import annotations

import os
import platform
import socket
from typing import Any


def cpu_name() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as fh:
            for line in fh:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


def cuda_uuids(indices: list[int]) -> list[str | None]:
    """NVML-style UUID (``GPU-…``) of each CUDA device index, as torch sees it (``None`` where unknown)."""
    out: list[str | None] = []
    for i in indices:
        try:
            import torch

            u = str(torch.cuda.get_device_properties(i).uuid)
        except Exception:  # noqa: BLE001 - an old torch without .uuid: fall back to the env
            out.append(None)
            continue
        out.append(u if u.startswith(("GPU-", "MIG-")) else f"GPU-{u}")
    return out


def _visible_entry(i: int) -> str | None:
    """The ``CUDA_VISIBLE_DEVICES`` entry CUDA device ``i`` stands for (``None``: variable unset)."""
    env = os.environ.get("CUDA_VISIBLE_DEVICES")
    if env is None or not env.strip():
        return None
    parts = [p.strip() for p in env.split(",") if p.strip()]
    return parts[i] if i < len(parts) else None


def _handle(pynvml: Any, i: int, uuid: str | None) -> tuple[Any, str]:
    """NVML handle of CUDA device ``i``. NVML numbers GPUs in its own (PCI) order and ignores
    ``CUDA_VISIBLE_DEVICES``, so index i is the wrong GPU whenever that variable (or
    CUDA_DEVICE_ORDER) reorders devices: go through the UUID, which both sides agree on."""
    if uuid:
        return pynvml.nvmlDeviceGetHandleByUUID(uuid), "uuid"
    entry = _visible_entry(i)
    if entry is not None and entry.startswith(("GPU-", "MIG-")):
        return pynvml.nvmlDeviceGetHandleByUUID(entry), "CUDA_VISIBLE_DEVICES uuid"
    if entry is not None and entry.isdigit() and os.environ.get("CUDA_DEVICE_ORDER") == "PCI_BUS_ID":
        return pynvml.nvmlDeviceGetHandleByIndex(int(entry)), "CUDA_VISIBLE_DEVICES index (PCI order)"
    return pynvml.nvmlDeviceGetHandleByIndex(i), "index (unverified: no UUID)"


def _nvml(indices: list[int], uuids: list[str | None] | None = None) -> dict[str, Any]:
    """Topology of the CUDA devices ``indices`` via pynvml (``nvidia-ml-py``); ``uuids`` (from
    :func:`cuda_uuids`) tie each CUDA index to its NVML device."""
    try:
        import pynvml
    except ImportError:
        return {"available": False, "reason": "pynvml not installed (pip install 'specmodel[gpu]')"}
    try:
        pynvml.nvmlInit()
    except Exception as exc:
        return {"available": False, "reason": f"nvmlInit failed: {exc}"}
    out: dict[str, Any] = {"available": True}
    try:
        def s(x: Any) -> str:
            return x.decode() if isinstance(x, bytes) else str(x)

        out["driver_version"] = s(pynvml.nvmlSystemGetDriverVersion())
        try:
            out["cuda_driver_version"] = int(pynvml.nvmlSystemGetCudaDriverVersion())
        except Exception:
            pass
        found = [_handle(pynvml, i, u) for i, u in zip(indices, uuids or [None] * len(indices), strict=True)]
        handles = [h for h, _ in found]
        gpus = []
        for i, (h, how) in zip(indices, found, strict=True):
            g: dict[str, Any] = {"index": i, "name": s(pynvml.nvmlDeviceGetName(h)), "nvml_lookup": how}
            try:
                g["uuid"] = s(pynvml.nvmlDeviceGetUUID(h))
            except Exception:
                pass
            for key, fn in (("pcie_gen", "nvmlDeviceGetCurrPcieLinkGeneration"),
                            ("pcie_width", "nvmlDeviceGetCurrPcieLinkWidth"),
                            ("pcie_gen_max", "nvmlDeviceGetMaxPcieLinkGeneration"),
                            ("pcie_width_max", "nvmlDeviceGetMaxPcieLinkWidth")):
                try:
                    g[key] = int(getattr(pynvml, fn)(h))
                except Exception:
                    pass
            links = 0
            for link in range(getattr(pynvml, "NVML_NVLINK_MAX_LINKS", 18)):
                try:
                    if pynvml.nvmlDeviceGetNvLinkState(h, link) == pynvml.NVML_FEATURE_ENABLED:
                        links += 1
                except Exception:
                    break
            g["nvlink_active_links"] = links
            gpus.append(g)
        out["gpus"] = gpus
        levels = {getattr(pynvml, n, None): n.replace("NVML_TOPOLOGY_", "").lower() for n in
                  ("NVML_TOPOLOGY_INTERNAL", "NVML_TOPOLOGY_SINGLE", "NVML_TOPOLOGY_MULTIPLE",
                   "NVML_TOPOLOGY_HOSTBRIDGE", "NVML_TOPOLOGY_NODE", "NVML_TOPOLOGY_SYSTEM")}
        p2p_names = {getattr(pynvml, n, None): n.replace("NVML_P2P_STATUS_", "").lower() for n in dir(pynvml)
                     if n.startswith("NVML_P2P_STATUS_")}
        pairs = []
        for a in range(len(indices)):
            for b in range(a + 1, len(indices)):
                p: dict[str, Any] = {"a": indices[a], "b": indices[b]}
                try:
                    p["topology"] = levels.get(pynvml.nvmlDeviceGetTopologyCommonAncestor(handles[a], handles[b]),
                                               "unknown")
                except Exception:
                    pass
                for key, cap in (("p2p_read", "NVML_P2P_CAPS_INDEX_READ"), ("p2p_nvlink", "NVML_P2P_CAPS_INDEX_NVLINK")):
                    try:
                        st = pynvml.nvmlDeviceGetP2PStatus(handles[a], handles[b], getattr(pynvml, cap))
                        p[key] = p2p_names.get(st, str(st))
                    except Exception:
                        pass
                pairs.append(p)
        out["pairs"] = pairs
        nvlink = any(g.get("nvlink_active_links", 0) > 0 for g in gpus)
        out["interconnect"] = "NVLink" if nvlink else "PCIe"
    except Exception as exc:  # partial answers are still useful
        out["error"] = str(exc)
    finally:
        try:
            pynvml.nvmlShutdown()
        except Exception:
            pass
    return out


def collect(device: str, local_world: int) -> dict[str, Any]:
    """Metadata of this node (call on each node's local rank 0)."""
    import torch

    hw: dict[str, Any] = {
        "hostname": socket.gethostname(),
        "cpu_name": cpu_name(),
        "cpu_count": os.cpu_count() or 0,
        "platform": platform.platform(),
        "python": platform.python_version(),
        "torch_version": torch.__version__,
        "gloo_available": bool(torch.distributed.is_gloo_available()),
    }
    try:
        hw["cpu_threads_per_rank"] = torch.get_num_threads()
    except Exception:
        pass
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    hw["gpu_count"] = gpus
    if gpus:
        hw["gpu_name"] = torch.cuda.get_device_name(0)
        hw["gpu_names"] = [torch.cuda.get_device_name(i) for i in range(gpus)]
        hw["gpu_memory_bytes"] = int(torch.cuda.get_device_properties(0).total_memory)
        hw["cuda_version"] = torch.version.cuda
        try:
            v = torch.cuda.nccl.version()
            hw["nccl_version"] = ".".join(str(x) for x in v) if isinstance(v, tuple) else str(v)
        except Exception as exc:
            hw["nccl_version"] = f"unknown ({exc})"
    if device == "cuda":
        idx = list(range(min(local_world, gpus)))
        topo = _nvml(idx, cuda_uuids(idx))
        hw["nvml"] = topo
        if topo.get("available"):
            hw["driver_version"] = topo.get("driver_version")
            hw["interconnect"] = topo.get("interconnect")
            hw["nvlink"] = topo.get("interconnect") == "NVLink"
    else:
        hw["interconnect"] = "loopback TCP (gloo, one host)"
        hw["nvlink"] = False
    return hw
