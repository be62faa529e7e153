"""Giving freed heap memory back to the system during training, which lowers the resident set.

PyTorch's CPU tensors come from ``malloc``. glibc serves a block above its *mmap threshold* with its own
``mmap`` (returned to the system on ``free``) and everything below from its arenas, whose freed pages it
keeps. The threshold is dynamic: each freed mmapped block raises it to that block's size (up to 32 MiB), so
after the first steps a step's activations and gradients (a few MB each) all come from the arenas, and as
blocks of many sizes are freed and reused in a varying order the pages ever touched stay resident: a tiny
model at batch 32 x 128 went from 0.7 GB at step 5 to 2.8 GB at step 550 on a busy machine (issue 28). No
Python object leaks; the memory is free inside malloc.

:func:`trim_malloc` is ``malloc_trim(0)``: glibc hands every whole free page of every arena back to the
system (``madvise(MADV_DONTNEED)``). The Trainer calls it every :data:`TRIM_EVERY` steps; the pages the next
step needs are faulted in again once, so its cost is about one step's page faults per ``TRIM_EVERY`` steps.
The alternative, a fixed low mmap threshold (``MALLOC_MMAP_THRESHOLD_=65536``), keeps memory lowest and flat
but maps, faults and unmaps every tensor in every step: 1.8x the step time of a tiny model on 2 quiet cores
(README "Pretraining", memory). Limiting the arenas (``MALLOC_ARENA_MAX=1``) changed nothing measurable.
Those stay the user's choice through glibc's environment variables.

Trimming alone did not keep the resident set flat (1.2 GB over steps 1-50, 2.3 GB over steps 550-600): each
step's tensors had that batch's own sizes (the real tokens after unpadding, the masked positions), so freed
blocks rarely fitted the next step's and the arenas fragmented, and oneDNN built a kernel per new row
count. The engine now rounds row counts to 32 sizes per octave (:func:`bertkit.modeling.fast.bucket_rows`,
:mod:`bertkit.modeling.unpad`): the same run holds 1.04-1.13 GB from step 100 to step 600
(``benchmarks/memory.py``; README "Memory over the steps").

``BERTKIT_MALLOC=default`` turns the trimming off (what ``benchmarks/memory.py --allocator default``
measures). Elsewhere than glibc (macOS, Windows, musl) it is a no-op.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import os
import platform

#: the Trainer gives the arenas' free pages back to the system every this many steps
TRIM_EVERY = 25
#: ``BERTKIT_MALLOC=default`` leaves glibc's malloc alone
ENV = "BERTKIT_MALLOC"


@functools.cache
def _glibc() -> ctypes.CDLL | None:
    """The running process's C library when it is glibc (it has ``malloc_trim``), else None."""
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    except OSError:
        return None
    if not hasattr(libc, "malloc_trim"):
        return None
    libc.malloc_trim.argtypes, libc.malloc_trim.restype = [ctypes.c_size_t], ctypes.c_int
    return libc


def enabled() -> bool:
    """True on glibc unless ``BERTKIT_MALLOC=default``."""
    return _glibc() is not None and os.environ.get(ENV, "").strip().lower() != "default"


def trim_malloc() -> bool:
    """``malloc_trim(0)``: give the free pages of every arena back to the system. True if memory was released;
    False when none was, or where this is not glibc or ``BERTKIT_MALLOC=default`` is set."""
    return enabled() and _glibc().malloc_trim(0) == 1
