"""The Python side of the simulated GPU (gslice.simgpu) and the shape of the
built libraries."""
from __future__ import annotations

import ctypes
import os
import subprocess

import pytest

from gslice.testing import GLIBC_OWN_LIBRARIES

from gslice import simgpu

# What programs and the shim expect the real libcuda to export.
REQUIRED_CUDA_EXPORTS = """
cuInit cuDriverGetVersion cuGetProcAddress cuGetProcAddress_v2 cuGetErrorString cuGetErrorName cuGetExportTable
cuDeviceGet cuDeviceGetCount cuDeviceGetName cuDeviceGetUuid cuDeviceGetUuid_v2 cuDeviceTotalMem cuDeviceTotalMem_v2
cuDeviceGetAttribute cuDevicePrimaryCtxRetain cuDevicePrimaryCtxRelease cuDevicePrimaryCtxRelease_v2
cuDevicePrimaryCtxReset_v2 cuDevicePrimaryCtxGetState cuDevicePrimaryCtxSetFlags_v2
cuCtxCreate cuCtxCreate_v2 cuCtxCreate_v3 cuCtxCreate_v4 cuCtxDestroy_v2 cuCtxSetCurrent cuCtxGetCurrent
cuCtxPushCurrent_v2 cuCtxPopCurrent_v2 cuCtxGetDevice cuCtxSynchronize
cuModuleLoad cuModuleLoadData cuModuleLoadDataEx cuModuleLoadFatBinary cuModuleGetFunction cuModuleUnload
cuLibraryLoadData cuLibraryGetKernel
cuLaunchKernel cuLaunchKernel_ptsz cuLaunchKernelEx cuLaunchKernelEx_ptsz cuLaunchCooperativeKernel
cuLaunchCooperativeKernel_ptsz
cuGraphCreate cuGraphAddKernelNode cuGraphAddKernelNode_v2 cuGraphInstantiate cuGraphInstantiateWithFlags
cuGraphLaunch cuGraphLaunch_ptsz cuGraphExecDestroy cuGraphDestroy cuStreamBeginCapture_v2 cuStreamEndCapture
cuStreamCreate cuStreamCreateWithPriority cuStreamDestroy cuStreamDestroy_v2 cuStreamSynchronize
cuStreamSynchronize_ptsz cuStreamQuery cuStreamQuery_ptsz cuStreamWaitEvent cuStreamWaitEvent_ptsz
cuEventCreate cuEventRecord cuEventRecord_ptsz cuEventQuery cuEventSynchronize cuEventElapsedTime
cuEventElapsedTime_v2 cuEventDestroy cuEventDestroy_v2
cuMemAlloc cuMemAlloc_v2 cuMemAllocPitch_v2 cuMemAllocManaged cuMemAllocAsync cuMemAllocAsync_ptsz
cuMemAllocFromPoolAsync cuMemAllocFromPoolAsync_ptsz cuMemFree cuMemFree_v2 cuMemFreeAsync cuMemFreeAsync_ptsz
cuMemCreate cuMemRelease cuMemAddressReserve cuMemAddressFree cuMemMap cuMemUnmap cuMemSetAccess
cuMemGetAllocationGranularity cuArrayCreate_v2 cuArray3DCreate_v2 cuArrayDestroy cuMipmappedArrayCreate
cuMipmappedArrayDestroy cuMemGetInfo cuMemGetInfo_v2 cuMemcpyHtoD_v2 cuMemcpyDtoH_v2 cuMemcpyDtoD_v2
cuMemsetD8_v2 cuMemsetD32_v2
""".split()

REQUIRED_NVML_EXPORTS = """
nvmlInit nvmlInit_v2 nvmlInitWithFlags nvmlShutdown nvmlErrorString nvmlSystemGetDriverVersion
nvmlSystemGetNVMLVersion nvmlSystemGetCudaDriverVersion nvmlSystemGetCudaDriverVersion_v2 nvmlDeviceGetCount
nvmlDeviceGetCount_v2 nvmlDeviceGetHandleByIndex nvmlDeviceGetHandleByIndex_v2 nvmlDeviceGetHandleByUUID
nvmlDeviceGetUUID nvmlDeviceGetName nvmlDeviceGetIndex nvmlDeviceGetMemoryInfo nvmlDeviceGetMemoryInfo_v2
nvmlDeviceGetUtilizationRates nvmlDeviceGetComputeRunningProcesses_v3
""".split()


def _dynamic_symbols(path, *flags):
    out = subprocess.run(["nm", "-D", *flags, str(path)], check=True, capture_output=True, text=True).stdout
    return {line.split()[-1].split("@")[0] for line in out.splitlines() if line.strip()}


@pytest.mark.parametrize("library,required", [("libcuda.so.1", REQUIRED_CUDA_EXPORTS),
                                              ("libnvidia-ml.so.1", REQUIRED_NVML_EXPORTS)])
def test_libraries_export_the_driver_names_and_need_only_glibc(sim_libs, library, required):
    path = sim_libs / library
    exported = _dynamic_symbols(path, "--defined-only")
    assert not set(required) - exported
    # nothing but the API: internals (sim_*) stay hidden
    assert not {s for s in exported if s.startswith("sim_")}
    dynamic = subprocess.run(["readelf", "-d", str(path)], check=True, capture_output=True, text=True).stdout
    needed = {line.split("[")[1].rstrip("]") for line in dynamic.splitlines() if "(NEEDED)" in line}
    assert needed <= GLIBC_OWN_LIBRARIES, needed
    assert f"Library soname: [{library}]" in dynamic
    link = sim_libs / library.removesuffix(".1")
    assert link.is_symlink() and os.readlink(link) == library


def test_python_layout_mirror_matches_the_c_header(programs):
    out = subprocess.run([programs["layout_check"]], check=True, capture_output=True, text=True).stdout
    c_side = dict(line.rsplit(" ", 1) for line in out.splitlines())
    assert int(c_side["version"]) == simgpu.LAYOUT_VERSION
    assert int(c_side["sizeof.sim_device_shared"]) == ctypes.sizeof(simgpu._Device)
    assert int(c_side["sizeof.sim_process_slot"]) == ctypes.sizeof(simgpu._Slot)
    assert int(c_side["sizeof.sim_handoff"]) == ctypes.sizeof(simgpu._Handoff)
    structs = {"sim_device_shared": simgpu._Device, "sim_process_slot": simgpu._Slot,
               "sim_handoff": simgpu._Handoff}
    for key, offset in c_side.items():
        struct, _, field = key.partition(".")
        if struct in structs:
            assert getattr(structs[struct], field).offset == int(offset), key


def test_env_prepends_the_library_directory_and_names_the_simulator(sim_libs):
    environ = simgpu.env("unit-env", memory="2GiB", kernel_us=20, label="team-x",
                         base={"LD_LIBRARY_PATH": "/opt/lib", "PATH": "/bin"})
    assert environ["LD_LIBRARY_PATH"] == f"{sim_libs}{os.pathsep}/opt/lib"
    assert environ["GSLICE_SIM_NAME"] == "unit-env"
    assert environ["GSLICE_SIM_MEMORY"] == "2GiB"
    assert environ["GSLICE_SIM_KERNEL_US"] == "20.0"
    assert environ["GSLICE_SIM_LABEL"] == "team-x"
    assert environ["PATH"] == "/bin"
    bare = simgpu.env("unit-env", base={})
    assert bare["LD_LIBRARY_PATH"] == str(sim_libs)
    assert "GSLICE_SIM_MEMORY" not in bare


@pytest.mark.parametrize("kwargs,message", [
    ({"name": "a/b"}, "not usable"),
    ({"name": ""}, "not usable"),
    ({"name": "ok", "memory": 0}, "not a size"),
    ({"name": "ok", "memory": True}, "not a size"),
    ({"name": "ok", "kernel_us": -1}, "kernel_us"),
])
def test_env_rejects_bad_values(kwargs, message):
    with pytest.raises(ValueError, match=message):
        simgpu.env(**kwargs)


def test_reader_of_a_missing_simulator_says_so(sim_name):
    with pytest.raises(FileNotFoundError, match="no process has used it yet"):
        simgpu.SimGpu(sim_name)
    assert simgpu.unlink(sim_name) is False


def test_unlink_removes_the_segment(programs, processes, sim_name, parse):
    processes.run([programs["driver_check"], "init"], simgpu.env(sim_name))
    gpu = simgpu.SimGpu(sim_name)
    assert simgpu.shm_path(sim_name).exists()
    [process] = gpu.processes()
    assert process.label == "driver_check" and not process.alive  # label defaults to the program name
    gpu.unlink()
    assert not simgpu.shm_path(sim_name).exists()
