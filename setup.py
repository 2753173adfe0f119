"""Build the optional C recording hot path; everything else is declared in setup.cfg.

The extension is optional: without a C compiler the package installs and records through the
pure-Python buffers (profiler/record/buffers.py), at a higher cost per event.
"""
import sys

from setuptools import Extension, setup

ext_modules = []
if sys.platform.startswith("linux") or sys.platform == "darwin":
    ext_modules.append(
        Extension("profiler.record._hotpath", ["profiler/record/_hotpath.c"], optional=True,
                  extra_compile_args=["-O2"])
    )

setup(ext_modules=ext_modules)
