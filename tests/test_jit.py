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
