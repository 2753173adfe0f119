"""Build the optional C parts; everything else is declared in setup.cfg.

The extensions are optional: without a C compiler the package installs and records through the
pure-Python buffers (profiler/record/buffers.py) at a higher cost per event, and analyses with
the numpy versions of its kernels (span nesting, column ranges, trace rows), several times slower.
"""

import sys

from setuptools import Extension, setup

ext_modules = []
if sys.platform.startswith("linux") or sys.platform == "darwin":
    ext_modules += [
        Extension(
            name,
            [name.replace(".", "/") + ".c"],
            depends=["profiler/int64_buffer.h"],
            optional=True,
            extra_compile_args=["-O2"],
        )
        for name in (
            "profiler.record._hotpath",
            "profiler.kernels._nesting",
            "profiler.kernels._columns",
            "profiler.export._trace_rows",
        )
    ]
if sys.platform.startswith("linux"):  # its watcher reads /proc/self/statm; elsewhere spill.py's Python one watches
    ext_modules.append(
        Extension("profiler._resident", ["profiler/_resident.c"], optional=True, extra_compile_args=["-O2"])
    )

setup(ext_modules=ext_modules)
