"""Kernels compiled ahead of time into an extension module of their own.

Strategy: a compiled kernel costs a process ~0.3 CPU s before its first
packet (importing numba, then loading its cached machine code through
numba's typing and target machinery) -- a quarter of ingesting 200 k
packets. numba's ahead-of-time compiler (`numba.pycc`) writes the same
machine code into an ordinary CPython extension, which imports in a few
milliseconds without numba. `build` exports each kernel under the one
signature it was compiled for in this process (the warm-up has just run
them: `python -m tracekit.pipeline.warmup`), next to the numba cache in
`jit.cache_dir()`, whose name is a hash of the kernels' sources: a changed
kernel misses its module and runs through numba, as before. Kernels found
there are called through it (`jit.Kernel.__call__`); the others, and any
call with other argument types, go to numba. Such a module holds the GIL
while it runs, so only kernels whose callers do not overlap them with other
Python work belong in it: ingest's record scans and flow tracker, and
analyze's passes, whose only company is the writer thread's appends (DuckDB
runs them without the GIL; a kernel's call on a chunk takes milliseconds).
On the 2.9 M-packet mixed capture, analyze with its ten kernels built
ahead against through numba's cache, three alternated runs each
(2026-12-05): 12.8-13.2 against 13.3-14.3 s, 17.5-17.8 against 18.0-18.8
CPU s, peak memory 658-668 against 773-787 MB (numba and LLVM never
loaded). The modules are built for a generic CPU (pycc's default), so a
wheel moves between machines; built for this machine's CPU they were no
faster (docs/benchmarks.md).
"""

import os
import shutil
import tempfile
import warnings

from .jit import AOT_PREFIX, Kernel, aot_name, aot_path, cache_dir


def build(kernels, folder=None):
    """Compile each of `kernels` (jit.Kernel, each compiled for exactly one
    signature in this process) into a module of its own in `folder` (default
    jit.cache_dir()); returns their paths. Needs a C compiler. (A module
    each: pycc mistyped the flow tracker's helpers when the table's rehash,
    which shares one of them, was in the same module.)"""
    folder = folder or cache_dir()
    return [_build_one(k, folder) for k in kernels]


def missing(kernels, folder=None):
    """Those of `kernels` with no ahead-of-time module in `folder` (default
    jit.cache_dir(), named after these sources) yet."""
    folder = folder or cache_dir()
    return [k for k in kernels if not os.path.exists(aot_path(k, folder))]


def _build_one(kernel, folder):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # (pycc's deprecation notice)
        from numba.pycc import CC

    dispatcher = kernel.compiled()
    signatures = dispatcher.nopython_signatures
    if len(signatures) != 1:
        raise ValueError(f"{kernel.__name__}: compiled for {len(signatures)} signatures, "
                         f"not one: run it as its callers do first")
    name = aot_name(kernel)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cc = CC(AOT_PREFIX + name)
        cc.use_nrt = False  # as the kernels are compiled (jit.NRT): they allocate nothing
        # (a fresh copy: pycc mistyped a kernel whose helpers numba had compiled
        # in this process, "No conversion from int8 to Literal[int](-1)")
        fresh = Kernel(kernel.py_func, kernel.helpers).compiled()
        cc.export(name, signatures[0])(fresh.py_func)
        with tempfile.TemporaryDirectory() as tmp:
            cc.output_dir = tmp
            cc.compile()
            (made,) = os.listdir(tmp)
            os.makedirs(folder, exist_ok=True)
            target = os.path.join(folder, made)
            shutil.move(os.path.join(tmp, made), target + ".new")
            os.replace(target + ".new", target)  # (a process that loaded the old one keeps it)
    return target
