"""The optional C extensions: each has a pure-Python / numpy twin with the same results."""

from __future__ import annotations

import importlib
import os
from types import ModuleType
from typing import Optional


def native(module: str) -> Optional[ModuleType]:
    """The compiled extension `module` (e.g. "profiler.kernels._nesting"), or None when it is not
    built or PROFVIEW_PURE_PYTHON=1 asks for the pure-Python / numpy versions."""
    if os.environ.get("PROFVIEW_PURE_PYTHON") == "1":
        return None
    try:
        return importlib.import_module(module)
    except ImportError:
        return None
