"""Changing a program's code while it runs, and undoing it: attributes replaced on their owners
and a hook for a module the program has not imported yet. What `profview run` uses to follow a
script that has no profiling code (profiler/auto.py, integrations/torch_auto.py)."""

from __future__ import annotations

import importlib.abc
import importlib.util
import sys
from typing import Any, Callable


class Patches:
    """Replaced attributes and pending import hooks, all undone (last first) by `undo()`."""

    def __init__(self) -> None:
        self._undo: list[Callable[[], None]] = []

    def replace(self, owner: Any, name: str, value: Any) -> None:
        """Set `owner.name = value`; undo() puts back what `owner` itself held."""
        original = owner.__dict__[name]
        setattr(owner, name, value)
        self._undo.append(lambda: setattr(owner, name, original))

    def after_import(self, module: str, callback: Callable[[Any], None]) -> None:
        """Call `callback(module)` now if it is imported, else once the program imports it (unless undone first)."""
        if module in sys.modules:
            callback(sys.modules[module])
            return
        hook = _AfterImport(module, callback)
        sys.meta_path.insert(0, hook)
        self._undo.append(lambda: hook in sys.meta_path and sys.meta_path.remove(hook))

    def undo(self) -> None:
        """Put everything back (idempotent)."""
        while self._undo:
            self._undo.pop()()


class _AfterImport(importlib.abc.MetaPathFinder):
    """Calls `callback(module)` once the module `name` has been imported (a post-import hook)."""

    def __init__(self, name: str, callback: Callable[[Any], None]) -> None:
        self.name = name
        self.callback = callback
        self._busy = False

    def find_spec(self, fullname, path=None, target=None):
        if fullname != self.name or self._busy:
            return None
        self._busy = True
        try:
            spec = importlib.util.find_spec(fullname)
        finally:
            self._busy = False
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        spec.loader = _ThenLoader(spec.loader, self._done)
        return spec

    def _done(self, module: Any) -> None:
        if self in sys.meta_path:
            sys.meta_path.remove(self)
        self.callback(module)


class _ThenLoader(importlib.abc.Loader):
    def __init__(self, loader: Any, then: Callable[[Any], None]) -> None:
        self._loader = loader
        self._then = then

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module) -> None:
        self._loader.exec_module(module)
        self._then(module)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._loader, name)
