"""Packaging hook: generate the protocol code and build the native libraries
(libgslice.so, the simulated GPU) before the Python files are collected.
All metadata lives in pyproject.toml; the build steps in tools/build_native.py."""
import sys
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py as _build_py

sys.path.insert(0, str(Path(__file__).resolve().parent / "tools"))
import build_native  # noqa: E402


# gslice.v1 is generated code: it must exist before setuptools lists the
# packages (metadata is prepared before any build command runs).
if not (build_native.PACKAGE_DIR / "v1" / "__init__.py").exists():
    build_native.build_proto()


class build_py(_build_py):
    def run(self):
        build_native.build_all()
        super().run()


setup(cmdclass={"build_py": build_py})
