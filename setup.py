"""Packaging hook: generate the protocol code and build the native libraries
(libgslice.so, the simulated GPU) before the Python files are collected, and
tag the wheel for what it holds.

All metadata lives in pyproject.toml; the build steps in tools/build_native.py.
The wheel's native libraries are built with zig's clang for an old glibc
(tools/toolchain.py) and run under any CPython 3, so one wheel per platform:
py3-none-manylinux_2_17_<arch> (the shim and the simulated GPU both need at
most glibc 2.17). The tests' CPython module gslice._shim_api stays
out of the wheel.
"""
import sys
from pathlib import Path

from setuptools import Distribution, setup
from setuptools.command.bdist_wheel import bdist_wheel as _bdist_wheel
from setuptools.command.build_py import build_py as _build_py

sys.path.insert(0, str(Path(__file__).resolve().parent / "tools"))
import build_native  # noqa: E402
import toolchain  # noqa: E402


# gslice.v1 is generated code: it must exist before setuptools lists the
# packages (metadata is prepared before any build command runs).
if not (build_native.PACKAGE_DIR / "v1" / "__init__.py").exists():
    build_native.build_proto()


class build_py(_build_py):
    def run(self):
        if getattr(self, "editable_mode", False):
            build_native.build_all()   # a developer's tree: the usual build, test module included
        else:
            build_native.build_wheel_parts()
        super().run()


class NativeDistribution(Distribution):
    """Carries native libraries (as package data, built by build_py): so the
    files go to the wheel's platlib, where auditwheel looks for them."""

    def has_ext_modules(self):
        return True


class bdist_wheel(_bdist_wheel):
    """Not pure (it carries native libraries), but not tied to a Python
    version or ABI either: the libraries are plain C loaded with dlopen or
    LD_PRELOAD, never imported."""

    def finalize_options(self):
        super().finalize_options()
        self.root_is_pure = False

    def get_tag(self):
        glibc = max(toolchain.SHIM_GLIBC, toolchain.SIMGPU_GLIBC, key=lambda v: tuple(map(int, v.split("."))))
        return "py3", "none", toolchain.manylinux_tag(glibc)


setup(distclass=NativeDistribution, cmdclass={"build_py": build_py, "bdist_wheel": bdist_wheel})
