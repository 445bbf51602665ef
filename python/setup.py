"""Packages the hetplan Python API (see pyproject.toml, docs/python.md).

The extension module hetplan._hetplan comes from a CMake build of this
checkout: $HETPLAN_BUILD_DIR, else ../build (what scripts/build.sh makes),
when it holds one for this interpreter (same EXT_SUFFIX); otherwise this
runs CMake itself into python/build-cmake: a runtime-only configuration
(no MLIR; -DHETPLAN_BUILD_COMPILER=OFF) that builds only the module. The
`hetplan` executable (summary, compile) is not part of the wheel: the
package finds it through $HETPLAN_EXECUTABLE, PATH, or the build tree it
was built from.
"""
import os
import shutil
import subprocess
import sys
import sysconfig

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.dist import Distribution

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.path.dirname(HERE)
SUFFIX = sysconfig.get_config_var("EXT_SUFFIX") or ".so"


def prebuilt(build_dir):
    pkg = os.path.join(build_dir, "python", "hetplan")
    module = os.path.join(pkg, "_hetplan" + SUFFIX)
    return pkg if os.path.isfile(module) else None


def cmake_build():
    """Builds only the module, runtime-only, for this interpreter."""
    build = os.path.join(HERE, "build-cmake")
    gen = ["-G", "Ninja"] if shutil.which("ninja") else []
    subprocess.check_call(["cmake", *gen, "-S", SOURCE, "-B", build, "-DCMAKE_BUILD_TYPE=Release",
                           "-DHETPLAN_BUILD_COMPILER=OFF", "-DHETPLAN_BUILD_EXAMPLES=OFF",
                           "-DHETPLAN_ENABLE_CUDA=OFF", "-DBUILD_TESTING=OFF",
                           f"-DPython_EXECUTABLE={sys.executable}"])
    subprocess.check_call(["cmake", "--build", build, "--target", "hetplan_python",
                           "--parallel", os.environ.get("HETPLAN_JOBS", "2")])
    return prebuilt(build)


class BuildPy(build_py):
    def run(self):
        super().run()
        build_dir = os.environ.get("HETPLAN_BUILD_DIR", os.path.join(SOURCE, "build"))
        pkg = prebuilt(build_dir) or cmake_build()
        if not pkg:
            raise SystemExit(f"hetplan: no _hetplan{SUFFIX} in {build_dir}/python/hetplan and the CMake build "
                             "made none (is python3-pybind11 installed?)")
        dest = os.path.join(self.build_lib, "hetplan")
        os.makedirs(dest, exist_ok=True)
        for name in ("_hetplan" + SUFFIX, "_build_info.py"):
            if os.path.exists(os.path.join(pkg, name)):
                shutil.copy2(os.path.join(pkg, name), dest)
        print(f"hetplan: packaged the extension module from {pkg}")


class BinaryDistribution(Distribution):
    def has_ext_modules(self):  # a platform wheel (cpXY-linux_x86_64)
        return True


setup(cmdclass={"build_py": BuildPy}, distclass=BinaryDistribution)
