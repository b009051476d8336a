"""The wheel's platform tag, which setuptools cannot infer for binaries it did not compile:
scripts/build-wheel.sh computes it from the newest glibc symbol version the ELF files need
(manylinux_2_X_<arch>, PEP 600) and passes it as WD_WHEEL_PLAT. The files are programs and
libraries, not a CPython extension: any Python 3 (py3-none)."""
import os

from setuptools import setup
from setuptools.dist import Distribution

try:
    from wheel.bdist_wheel import bdist_wheel
except ImportError:  # newer setuptools carry their own
    from setuptools.command.bdist_wheel import bdist_wheel


class BinaryDistribution(Distribution):
    def has_ext_modules(self):
        return True


class PlatformWheel(bdist_wheel):
    def finalize_options(self):
        super().finalize_options()
        self.root_is_pure = False

    def get_tag(self):
        plat = os.environ.get("WD_WHEEL_PLAT")
        if not plat:
            raise SystemExit("setup.py: build the wheel with scripts/build-wheel.sh (WD_WHEEL_PLAT unset)")
        return "py3", "none", plat


setup(distclass=BinaryDistribution, cmdclass={"bdist_wheel": PlatformWheel})
