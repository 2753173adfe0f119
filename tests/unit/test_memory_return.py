"""profiler/memory.return_freed_memory: with it, a table of MMAP_THRESHOLD_BYTES or more gets a mapping of its
own (returned to the system when freed) even after glibc's threshold would have grown past it; without it, a
freed 16 MiB table raises the threshold and the next 5 MiB table comes from the heap (where objects that stay
can pin it). Checked in a clean interpreter with glibc's own count of mapped bytes (mallinfo2's hblkhd), after
a freed 16 MiB table that would have raised the default threshold past 5 MiB."""

from __future__ import annotations

import ctypes
import subprocess
import sys

import pytest

from profiler import memory, spill
from profiler.memory import MMAP_THRESHOLD_BYTES

PATTERN = """
import ctypes, importlib.util, sys
import numpy as np
class MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost")]
mallinfo2 = ctypes.CDLL(None).mallinfo2
mallinfo2.restype = MallInfo2
# profiler/memory.py alone: the package's imports (pandas, pyarrow) leave the heap in a state of their own
spec = importlib.util.spec_from_file_location("memory", sys.argv[2])
memory = importlib.util.module_from_spec(spec)
spec.loader.exec_module(memory)
if sys.argv[1] == "return":
    assert memory.return_freed_memory()
first = np.ones(16 << 20, np.uint8)
del first  # a freed 16 MiB mapping: glibc's default threshold grows past it
mapped = mallinfo2().hblkhd
table = np.ones(5 << 20, np.uint8)
print((mallinfo2().hblkhd - mapped) / (1 << 20))
"""


def mapped_mib(mode: str) -> float:
    """MiB of mappings a 5 MiB table added (0: it came from the heap)."""
    args = [sys.executable, "-c", PATTERN, mode, memory.__file__]
    return float(subprocess.run(args, capture_output=True, text=True, check=True).stdout)


def glibc_with_mallinfo2() -> bool:
    try:
        ctypes.CDLL(None).mallinfo2  # noqa: B018 (glibc 2.33+)
    except (OSError, AttributeError):
        return False
    return True


@pytest.mark.skipif(not glibc_with_mallinfo2(), reason="glibc's allocator (2.33+)")
def test_large_tables_get_mappings_of_their_own():
    assert MMAP_THRESHOLD_BYTES <= 5 << 20
    # fixed threshold: its own mapping, unmapped when freed. (Without the setting the table usually comes
    # from the heap, but not always: where the heap cannot grow, glibc maps it too, as one CI run showed.)
    assert mapped_mib("return") >= 5


TRIM = """
import ctypes, importlib.util, sys
import numpy as np
ctypes.CDLL(None).mallopt(-3, 1 << 20)  # memory.return_freed_memory's setting: 300 KB tables from the heap
spec = importlib.util.spec_from_file_location("module", sys.argv[1])  # the module alone (see PATTERN)
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
def rss_mib():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096 / (1 << 20)
chunks = [np.ones(300 << 10, np.uint8) for _ in range(201)]  # 60 MB of a trace's chunk columns: on the heap
# the highest of them stays: the heap's top does not shrink when the others are freed (a table allocated after
# them may land in a hole below them, left by the imports: then freeing them shrinks the top at once)
pin = chunks.pop(max(range(len(chunks)), key=lambda i: chunks[i].ctypes.data))
del chunks
freed = rss_mib()
getattr(module, sys.argv[2])()
print(freed - rss_mib())
"""


@pytest.mark.skipif(not glibc_with_mallinfo2(), reason="glibc's allocator (2.33+)")
@pytest.mark.parametrize(
    "module, give_back", [(memory, "give_back_freed_memory"), (spill, "drop_resident")], ids=["memory", "spill"]
)
def test_freed_heap_pages_go_back_to_the_system(module, give_back):
    """60 MB of small tables freed under one that stays: resident until give_back_freed_memory, then returned; and
    by spill.drop_resident, which every chunked loop calls after a chunk (its freed temporaries had piled up)."""
    args = [sys.executable, "-c", TRIM, module.__file__, give_back]
    returned_mib = float(subprocess.run(args, capture_output=True, text=True, check=True).stdout)
    assert returned_mib >= 50
