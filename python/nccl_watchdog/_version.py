# Replaced in the wheel by scripts/build-wheel.sh (the CMake project's version and the wheel's
# platform tag); these are what a source checkout reports.
__version__ = "0+source"
__platform__ = ""
