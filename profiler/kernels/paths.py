"""Paths through nested named nodes as codes (call stacks, module call paths): a trace holds millions of nodes but
few distinct paths (its code paths), so each node keeps an integer code and each distinct path is joined into text
once."""

from __future__ import annotations

import numpy as np


class PathCodes:
    """The distinct paths met, numbered as met: code 0 is the empty path (""), each other a (path, name) pair whose
    text is that path's text and the name joined by `separator` (the name alone under the empty path)."""

    def __init__(self, names: list[str], separator: str) -> None:
        self._names, self._separator = names, separator
        self._code_of: dict[tuple[int, int], int] = {}
        self.texts = [""]

    def entered(self, above: np.ndarray, name: np.ndarray) -> np.ndarray:
        """The paths of nodes under the paths `above` (codes) with the names `name` (codes into `names`; -1: a node
        that adds no name, in path `above` itself): one lookup per distinct (path, name) pair."""
        out = above.astype(np.int32)
        named = name >= 0
        if named.any():
            width = len(self._names)  # a (path, name) pair as one number
            pairs = above[named].astype(np.int64) * width + name[named]
            distinct, of_pair = np.unique(pairs, return_inverse=True)
            found = [self._code(*divmod(pair, width)) for pair in distinct.tolist()]
            out[named] = np.array(found, dtype=np.int32)[of_pair]
        return out

    def _code(self, above: int, name: int) -> int:
        code = self._code_of.get((above, name))
        if code is None:
            text, own = self.texts[above], self._names[name]
            code = self._code_of[(above, name)] = len(self.texts)
            self.texts.append(f"{text}{self._separator}{own}" if text else own)
        return code
