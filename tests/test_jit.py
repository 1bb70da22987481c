"""The compiled kernels' options and cache (tracekit.core.jit)."""

import os
import re

import numpy as np
from numba import njit
from numba.core.caching import CacheImpl

from tracekit.core import jit
from tracekit.kernels import wireshark
from tracekit.kernels.wireshark import alloc, release


def _free_all(meta, link, n):
    """A kernel passing its arrays to helpers once per element, as the
    analysis kernels do per packet."""
    for _ in range(n):
        k = alloc(meta, link)
        release(meta, link, k)
    return meta[0]


def test_kernels_count_no_references():
    """With numba's reference counting on, each array handed to an inlined
    helper is counted up and down at every call (the split kernels ran
    1.6-2.2x slower): the machine code has no such calls."""
    k = jit.Kernel(_free_all, helpers=(alloc, release))
    compiled = k.compiled()
    options = {k: v for k, v in compiled.targetoptions.items() if k not in ("nopython", "cache")}
    fresh = njit(**options)(compiled.py_func)
    meta, link = np.array([0, -1, 0], np.int64), np.zeros(4, np.int64)
    assert fresh(meta, link, 10) == 1  # one entry, taken and freed ten times
    ir = next(iter(fresh.inspect_llvm().values()))
    assert "@_free_all" in ir or "_free_all" in ir
    assert not re.search(r"call \w+ @NRT_(incref|decref)", ir)


def test_kernel_cache_named_by_module_not_by_path(tmp_path, monkeypatch):
    """A cache made at install (tracekit/_kernels, `warmup --into-package`)
    is found when the package is installed elsewhere: the folder is named
    after the kernel's module path in the package, numba's own after the
    file's absolute path."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    jit._locator()
    locator = CacheImpl._locator_classes[0].from_function(wireshark.analyze.py_func,
                                                          wireshark.__file__)
    assert locator.get_cache_path() == os.path.join(jit.cache_dir(), "kernels")
    assert os.path.isdir(locator.get_cache_path())



def _kernels():
    """Every Kernel of the package and every helper it compiles with, as
    (name, the function's syntax tree)."""
    import ast
    import importlib
    import inspect
    import pathlib
    import textwrap
    root = pathlib.Path(jit.__file__).resolve().parents[1]
    seen = {}
    for path in sorted(root.rglob("*.py")):
        text = path.read_text()
        if "kernel" not in text or "lab" in path.parts or "cli" in path.parts:
            continue
        module = importlib.import_module(
            ".".join(path.relative_to(root.parent).with_suffix("").parts))
        for value in vars(module).values():
            if isinstance(value, jit.Kernel):
                for f in (value.py_func, *value.helpers):
                    seen[f.__module__ + "." + f.__name__] = f
    for name, f in sorted(seen.items()):
        yield name, ast.parse(textwrap.dedent(inspect.getsource(f))).body[0]


def test_no_kernel_takes_a_view_or_allocates():
    """Without reference counting a kernel may not make an array -- a slice
    (a view) or np.empty & co -- and numba says so only when it first compiles
    it, which for a kernel no sample reaches (flows._rehash: a flow table that
    grows) is a user's first big capture. So it is read from the source."""
    import ast
    makes = {"empty", "zeros", "ones", "full", "arange", "array", "concatenate", "copy",
             "empty_like", "zeros_like", "ones_like", "full_like"}
    kernels = list(_kernels())
    found = [(name, n.lineno) for name, fn in kernels for n in ast.walk(fn)
             if isinstance(n, ast.Slice)
             or (isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
                 and getattr(n.func.value, "id", None) == "np" and n.func.attr in makes)]
    assert len(kernels) > 20 and found == []
