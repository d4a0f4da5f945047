"""Finds the GPU this daemon serves, through NVML (pynvml): its UUID, name and
physical memory. Works the same over the real driver and over gslice's
simulated libnvidia-ml.so.1 (LD_LIBRARY_PATH pointing at it)."""
from __future__ import annotations

import re
from dataclasses import dataclass


class GpuDiscoveryError(Exception):
    """The GPU could not be found; the message says why and what to do."""


NVML_MISSING_HINT = (
    "NVML not found: no NVIDIA driver on this machine (libnvidia-ml.so.1 could not be loaded). "
    "For a simulated GPU run with "
    "LD_LIBRARY_PATH=$(python -c 'import gslice.simgpu as s; print(s.lib_dir())')"
)


@dataclass(frozen=True)
class GpuInfo:
    index: int
    uuid: str
    name: str
    memory_total: int  # bytes

    @classmethod
    def parse(cls, text: str) -> "GpuInfo":
        """'uuid,name,bytes' (the daemon's --fake-gpu test flag)."""
        parts = [p.strip() for p in text.split(",")]
        if len(parts) != 3 or not parts[0] or not parts[1] or not parts[2].isdigit() or int(parts[2]) <= 0:
            raise GpuDiscoveryError(f"fake GPU {text!r} is malformed; expected 'UUID,NAME,BYTES' with BYTES > 0")
        return cls(index=0, uuid=parts[0], name=parts[1], memory_total=int(parts[2]))


def _text(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def discover(selector: str | int | None = None) -> GpuInfo:
    """The GPU named by index ("0", 0) or UUID ("GPU-..."); index 0 when None."""
    try:
        import pynvml
    except ImportError as exc:  # nvidia-ml-py is a declared dependency
        raise GpuDiscoveryError(f"the pynvml module (package nvidia-ml-py) is not installed: {exc}") from exc
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError_LibraryNotFound:
        raise GpuDiscoveryError(NVML_MISSING_HINT) from None
    except pynvml.NVMLError as exc:
        raise GpuDiscoveryError(f"NVML failed to initialise: {exc}") from None
    try:
        count = pynvml.nvmlDeviceGetCount()
        if count == 0:
            raise GpuDiscoveryError("NVML reports no GPUs on this machine")
        text = "0" if selector is None else str(selector).strip()
        if re.fullmatch(r"[0-9]+", text):
            index = int(text)
            if index >= count:
                raise GpuDiscoveryError(f"GPU index {index} does not exist; this machine has GPUs 0..{count - 1}")
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
        else:
            try:
                handle = pynvml.nvmlDeviceGetHandleByUUID(text.encode() if isinstance(text, str) else text)
            except pynvml.NVMLError:
                uuids = [_text(pynvml.nvmlDeviceGetUUID(pynvml.nvmlDeviceGetHandleByIndex(i))) for i in range(count)]
                raise GpuDiscoveryError(
                    f"GPU {text!r} is neither an index nor a known UUID; known: {', '.join(uuids)}"
                ) from None
            index = int(pynvml.nvmlDeviceGetIndex(handle))
        memory = pynvml.nvmlDeviceGetMemoryInfo(handle)
        return GpuInfo(
            index=index,
            uuid=_text(pynvml.nvmlDeviceGetUUID(handle)),
            name=_text(pynvml.nvmlDeviceGetName(handle)),
            memory_total=int(memory.total),
        )
    except pynvml.NVMLError as exc:
        raise GpuDiscoveryError(f"NVML query for GPU {selector!r} failed: {exc}") from None
    finally:
        try:
            pynvml.nvmlShutdown()
        except pynvml.NVMLError:
            pass
