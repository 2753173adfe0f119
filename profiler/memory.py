"""Freed memory that goes back to the operating system, in profview's own processes.

glibc's malloc serves a block of 128 KiB or more with its own mapping, returned when freed, but each
such free raises that threshold (up to 32 MiB): later blocks come from the heap, where small objects
that stay pin the freed tables around them. Reading and analysing a big trace allocates and frees
tables of megabytes all along, and so held on to much of what it ever used. A fixed threshold (which
also stops it growing) keeps every block of MMAP_THRESHOLD_BYTES or more a mapping of its own, given
back when freed. `profview import-kineto` of a 1.03 GB trace (2,765,795 events, machine otherwise idle):
peak RSS 1735 -> 1305 MB, 47.4 -> 51.0 s (docs/kineto.md).

`return_freed_memory` (the setting) is for processes profview owns (the command line, its import workers),
never a library user's: a training loop keeps its own allocator's trade-offs. `give_back_freed_memory`
(glibc's malloc_trim, and Arrow's pool releasing what it keeps) changes no setting: the importer and the
writers call it where a stage has just freed many tables, in any process. Elsewhere than glibc (musl, macOS)
the C library part does nothing.
"""

from __future__ import annotations

import sys

from profiler.spill import drop_resident, glibc_function

M_MMAP_THRESHOLD = -3  # mallopt's parameter number (malloc.h)
MMAP_THRESHOLD_BYTES = 1 << 20  # blocks at least this large get a mapping of their own. Measured: 64 KiB lowers
# the peak no further and costs 24 % more time; 1 MiB was ~ 4 MiB while tables were whole, and is lower since
# they are built a window of 1 M rows at a time (a window's 1-4 MB arrays, freed, no longer leave holes in the
# heap): 0.96 GB trace 776 -> 756 MB, 3.84 GB 2433 -> 2367 MiB (docs/kineto.md)


def return_freed_memory() -> bool:
    """Have the C library give large freed blocks back to the operating system from now on; whether it
    could (glibc)."""
    mallopt = glibc_function("mallopt")
    return mallopt is not None and bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES))


def give_back_freed_memory() -> None:
    """Return freed memory to the operating system now: the C heap's free pages (glibc's malloc_trim; elsewhere
    nothing), what Arrow's pool keeps of freed buffers, and the pages of spilled arrays (profiler/spill.py).

    The blocks below the mmap threshold (a chunk's columns, ~350 KB each) come from the heap, which keeps
    what is freed in it for later; the importer calls this when it frees many at once (the chunks' columns
    joined, the event columns dropped), so the next stage's tables do not come on top of them. It changes
    no allocator setting and costs ~milliseconds, so it is safe in a library user's process too."""
    drop_resident()  # the C heap's free pages and the spilled arrays' pages (profiler/spill.py)
    arrow = sys.modules.get("pyarrow")  # Arrow's own allocator keeps what its buffers freed, too
    if arrow is not None:
        arrow.default_memory_pool().release_unused()
