"""include/gslice_cuda_abi.h against NVIDIA's cuda.h of CUDA 12 and 13:
the same constants, sizes and field offsets, compiled and printed by two
small C programs (the headers cannot be included together).

The headers come from NVIDIA's runtime wheels, pinned in the test extras
(nvidia-cuda-runtime-cu12, nvidia-cuda-runtime), so this runs on every
machine the suite runs on, GPU or not; a toolkit in /usr/local is checked
too when there is one."""
from __future__ import annotations

import importlib.util
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# Where the pinned wheels put cuda.h, under the `nvidia` namespace package.
WHEEL_HEADERS = {"cuda12": "cuda_runtime/include/cuda.h", "cuda13": "cu13/include/cuda.h"}


def _wheel_header(relative: str) -> Path | None:
    spec = importlib.util.find_spec("nvidia")
    for root in (spec.submodule_search_locations or []) if spec else []:
        if (Path(root) / relative).exists():
            return Path(root) / relative
    return None


def real_headers() -> dict[str, Path | None]:
    headers = {name: _wheel_header(relative) for name, relative in WHEEL_HEADERS.items()}
    for toolkit in [Path("/usr/local/cuda/include/cuda.h"), *sorted(Path("/usr/local").glob("cuda-*/include/cuda.h"))]:
        if toolkit.exists():
            headers[f"toolkit:{toolkit.parent.parent.name}"] = toolkit
    return headers

CONSTANTS = ["CUDA_SUCCESS", "CUDA_ERROR_INVALID_VALUE", "CUDA_ERROR_OUT_OF_MEMORY", "CUDA_ERROR_NOT_INITIALIZED",
             "CUDA_ERROR_DEINITIALIZED", "CUDA_ERROR_NO_DEVICE", "CUDA_ERROR_INVALID_DEVICE",
             "CUDA_ERROR_INVALID_IMAGE", "CUDA_ERROR_INVALID_CONTEXT", "CUDA_ERROR_INVALID_HANDLE",
             "CUDA_ERROR_NOT_FOUND", "CUDA_ERROR_NOT_READY", "CUDA_ERROR_LAUNCH_FAILED", "CUDA_ERROR_NOT_PERMITTED",
             "CUDA_ERROR_NOT_SUPPORTED", "CUDA_ERROR_UNKNOWN", "CU_GET_PROC_ADDRESS_DEFAULT",
             "CU_GET_PROC_ADDRESS_LEGACY_STREAM", "CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM",
             "CU_GET_PROC_ADDRESS_SUCCESS", "CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND",
             "CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT", "CU_AD_FORMAT_UNSIGNED_INT8", "CU_AD_FORMAT_UNSIGNED_INT16",
             "CU_AD_FORMAT_UNSIGNED_INT32", "CU_AD_FORMAT_SIGNED_INT8", "CU_AD_FORMAT_SIGNED_INT16",
             "CU_AD_FORMAT_SIGNED_INT32", "CU_AD_FORMAT_HALF", "CU_AD_FORMAT_FLOAT",
             "(long)CU_STREAM_LEGACY", "(long)CU_STREAM_PER_THREAD",
             "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED", "CUDA_ERROR_STREAM_CAPTURE_INVALIDATED",
             "CUDA_ERROR_STREAM_CAPTURE_IMPLICIT", "CUDA_ERROR_CAPTURED_EVENT", "CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD",
             "CU_STREAM_CAPTURE_MODE_GLOBAL", "CU_STREAM_CAPTURE_MODE_THREAD_LOCAL", "CU_STREAM_CAPTURE_MODE_RELAXED",
             "CU_STREAM_CAPTURE_STATUS_INVALIDATED", "CU_MEM_LOCATION_TYPE_DEVICE", "CU_MEM_LOCATION_TYPE_HOST_NUMA",
             "CU_MEMPOOL_ATTR_RELEASE_THRESHOLD", "CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT",
             "CU_MEMPOOL_ATTR_USED_MEM_CURRENT", "CU_MEMORYTYPE_HOST", "CU_MEMORYTYPE_DEVICE", "CU_MEMORYTYPE_ARRAY",
             "CU_MEMORYTYPE_UNIFIED", "CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT", "CU_GRAPH_MEM_ATTR_USED_MEM_HIGH",
             "CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT", "CU_GRAPH_MEM_ATTR_RESERVED_MEM_HIGH",
             "CU_GRAPH_NODE_TYPE_KERNEL", "CU_GRAPH_NODE_TYPE_MEM_ALLOC", "CU_GRAPH_NODE_TYPE_MEM_FREE",
             "CU_MEM_ALLOCATION_TYPE_PINNED"]
LAYOUTS = {
    "CUDA_ARRAY_DESCRIPTOR": ["Width", "Height", "Format", "NumChannels"],
    "CUDA_ARRAY3D_DESCRIPTOR": ["Width", "Height", "Depth", "Format", "NumChannels", "Flags"],
    "CUlaunchConfig": ["gridDimX", "blockDimX", "sharedMemBytes", "hStream", "attrs", "numAttrs"],
    "CUlaunchAttribute": ["id"],
    "CUmemAllocationProp": ["type", "requestedHandleTypes", "location", "win32HandleMetaData", "allocFlags"],
    "CUmemLocation": ["type", "id"],
    "CUDA_MEMCPY2D": ["srcXInBytes", "srcMemoryType", "srcHost", "srcDevice", "srcArray", "srcPitch", "dstXInBytes",
                      "dstMemoryType", "dstHost", "dstDevice", "dstArray", "dstPitch", "WidthInBytes", "Height"],
    "CUDA_MEMCPY3D": ["srcZ", "srcLOD", "srcMemoryType", "srcArray", "reserved0", "srcPitch", "srcHeight", "dstZ",
                      "dstMemoryType", "dstDevice", "reserved1", "dstPitch", "dstHeight", "WidthInBytes", "Depth"],
    "CUDA_MEMCPY3D_PEER": ["srcMemoryType", "srcContext", "srcPitch", "srcHeight", "dstMemoryType", "dstContext",
                           "dstPitch", "dstHeight", "WidthInBytes", "Depth"],
    "CUmemPoolProps": ["allocType", "handleTypes", "location", "win32SecurityAttributes", "maxSize", "usage"],
    "CUDA_MEM_ALLOC_NODE_PARAMS": ["poolProps", "accessDescs", "accessDescCount", "bytesize", "dptr"],
}
SIZES = ["CUdeviceptr", "CUdevice", "CUresult", "cuuint64_t", "CUmemGenericAllocationHandle"]


def probe_source(header: str) -> str:
    lines = [f"#include <stdio.h>\n#include <stddef.h>\n#include \"{header}\"\nint main(void) {{"]
    for c in CONSTANTS:
        lines.append(f'    printf("%s=%ld\\n", "{c}", (long)({c}));')
    for s in SIZES:
        lines.append(f'    printf("sizeof {s}=%zu\\n", sizeof({s}));')
    for struct, fields in LAYOUTS.items():
        lines.append(f'    printf("sizeof {struct}=%zu\\n", sizeof({struct}));')
        for f in fields:
            lines.append(f'    printf("{struct}.{f}=%zu\\n", offsetof({struct}, {f}));')
    lines.append("    return 0;\n}\n")
    return "\n".join(lines)


def run_probe(tmp_path: Path, name: str, header: str, include: Path) -> str:
    src = tmp_path / f"{name}.c"
    src.write_text(probe_source(header))
    exe = tmp_path / name
    subprocess.run(["gcc", "-O0", f"-I{include}", str(src), "-o", str(exe)], check=True)
    return subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout


@pytest.mark.parametrize("version", sorted(real_headers()))
def test_cuda_abi_matches_the_real_header(tmp_path, version):
    real = real_headers()[version]
    assert real is not None, (f"no cuda.h of {version}: install the test extras (pip install -e '.[test]'), which "
                              "pin NVIDIA's runtime wheels that carry it")
    ours = run_probe(tmp_path, "ours", "gslice_cuda_abi.h", ROOT / "include")
    theirs = run_probe(tmp_path, "theirs", "cuda.h", real.parent)
    assert ours.splitlines() == theirs.splitlines()
