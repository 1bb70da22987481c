"""Sequential kernels: plain Python for small inputs, numba for large ones.

Strategy: a few loops cannot be vectorised (record boundaries, the flow state
machine, a blocked copy). Each is written once, in the subset of Python that
numba compiles, and wrapped in `Kernel`. Numba costs about a second the
first time a process uses it (import, LLVM start-up, loading the cached
machine code), which dwarfs the work on a small capture; so the caller says
how big its input is and small inputs run the very same function as plain
Python. `TRACEKIT_JIT=always|never` overrides the choice (the tests run both
ways and compare).
"""

import os
import types

import numpy as np

# Inputs smaller than this many bytes run as plain Python.
JIT_MIN_BYTES = 8 << 20
# The analysis kernels do far more per packet than the record scans: they
# count each packet as this many bytes, so captures of more than ~16,000
# TCP packets are compiled (36,000 packets: 6.7 s as Python, 1.9 s compiled).
PYTHON_COST = 512


def use_jit(input_bytes):
    mode = os.environ.get("TRACEKIT_JIT", "auto")
    if mode == "always":
        return True
    if mode == "never":
        return False
    return input_bytes >= JIT_MIN_BYTES


class Kernel:
    """A function that runs compiled (numba, cached on disk) or as plain Python.

    `helpers` are module-level functions the kernel calls: plain Python in
    the Python run, compiled alongside it in the compiled run.
    """

    def __init__(self, fn, helpers=()):
        self.py_func = fn
        self.helpers = tuple(helpers)
        self.__name__ = fn.__name__
        self.__doc__ = fn.__doc__
        self._compiled = None

    def compiled(self):
        if self._compiled is None:
            from numba import njit

            fn = self.py_func
            if self.helpers:  # the same code, seeing compiled helpers
                scope = dict(fn.__globals__)
                for helper in self.helpers:
                    scope[helper.__name__] = njit(cache=True, nogil=True)(helper)
                fn = types.FunctionType(fn.__code__, scope, fn.__name__, fn.__defaults__,
                                        fn.__closure__)
                fn.__qualname__ = self.py_func.__qualname__
                fn.__module__ = self.py_func.__module__
            self._compiled = njit(cache=True, nogil=True)(fn)
        return self._compiled

    def __call__(self, jit, *args):
        if jit:
            return self.compiled()(*args)
        with np.errstate(over="ignore"):  # uint64 hashing wraps, as in compiled code
            return self.py_func(*args)


def kernel(fn=None, *, helpers=()):
    """Decorator: `@kernel` or `@kernel(helpers=(f, g))`."""
    if fn is None:
        return lambda f: Kernel(f, helpers)
    return Kernel(fn, helpers)
