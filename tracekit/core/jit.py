"""Sequential kernels: plain Python for small inputs, numba for large ones.

Strategy: a few loops cannot be vectorised (record boundaries, the flow state
machine, a blocked copy). Each is written once, in the subset of Python that
numba compiles, and wrapped in `Kernel`. Numba costs about a second the
first time a process uses it (import, LLVM start-up, loading the cached
machine code), which dwarfs the work on a small capture; so the caller says
how big its input is and small inputs run the very same function as plain
Python. `TRACEKIT_JIT=always|never` overrides the choice (the tests run both
ways and compare).

Compiled code is cached on disk, in a folder named after a hash of the
source files of the layers that hold kernels and helpers: numba's own cache
checks only the kernel's file, so a helper changed in another module would
otherwise leave stale machine code behind. `python -m tracekit.pipeline.warmup
--into-package` compiles every kernel ahead of time into the package itself
(tracekit/_kernels/kernels-<hash>; `make setup` runs it, and so does the
wheel build, hatch_build.py, when numba is there), so a new install's first
capture does not pay for it; without that folder the cache is the user's
(~/.cache/tracekit). Inside the folder, a kernel's entries are named after
its module's path in the package, not after its absolute path as numba
names them, so the cache made at install is found wherever the package is.

Ingest's and analyze's kernels also go past numba's start-up: the warm-up
compiles them ahead of time into extension modules in the same folder
(core/aot.py; `Kernel.__call__` calls those when present, and a compiled
ingest or analyze then never imports numba; and as such a module costs no
start-up, small inputs run it too, not the Python, unless `TRACEKIT_JIT`
says which); without those, `preload` loads ingest's on a thread while the
store is opened.
"""

import hashlib
import importlib.util
import os
import shutil
import sysconfig
import threading
import types
from pathlib import Path

import numpy as np

# Kernels allocate nothing: they fill arrays the caller made. Numba's reference
# counting (NRT) is off for them: with it on, every array passed to an inlined
# helper is counted up and down (two atomic operations) at each call, i.e. per
# packet per array, which made the split kernels 1.6-2.2x slower (wireshark
# analyze 39 -> 18 ms, segments classify 58 -> 24 ms, stalls limitation_runs
# 68 -> 13 ms on a 174k-packet capture with it off). A kernel that allocates
# fails to compile ("NRT required but not enabled"): make the array outside.
NRT = False
# Inputs smaller than this many bytes run as plain Python.
JIT_MIN_BYTES = 8 << 20
# The analysis kernels do far more per packet than the record scans: they
# count each packet as this many bytes, so captures of more than ~16,000
# TCP packets are compiled (36,000 packets: 6.7 s as Python, 1.9 s compiled).
PYTHON_COST = 512
# the package's own folder of compiled kernels (tracekit/_kernels, made at install)
PACKAGE_CACHE = "_kernels"


_loaded = False  # a kernel has been compiled in this process: the cost is paid
# kernels compiled ahead of time (core/aot.py): a module each, in cache_dir()
AOT_PREFIX = "tracekit_aot_"
_aot_folder = None  # cache_dir() once looked at by `ahead` (None: not yet)
_aot_enabled = True  # False: numba only (the warm-up, which compiles through it)
_compiling = threading.Lock()  # one thread makes a kernel's dispatchers (see preload)
_preloading = None  # the thread of `preload`, once started


def use_jit(input_bytes):
    mode = os.environ.get("TRACEKIT_JIT", "auto")
    if mode == "always":
        return True
    if mode == "never":
        return False
    return _loaded or input_bytes >= JIT_MIN_BYTES


def aot_name(kernel):
    """A kernel's name in the ahead-of-time module (module path and name)."""
    return f"{kernel.py_func.__module__.replace('.', '_')}__{kernel.__name__}"


def aot_path(kernel, folder):
    """The file of `kernel`'s ahead-of-time module in `folder`."""
    return os.path.join(folder, AOT_PREFIX + aot_name(kernel)
                        + sysconfig.get_config_var("EXT_SUFFIX"))


def aot_function(kernel):
    """`kernel` compiled ahead of time for these sources (its module in
    cache_dir(), imported without numba), or None."""
    global _aot_folder
    if _aot_folder is None:
        _aot_folder = cache_dir()
    name = aot_name(kernel)
    path = aot_path(kernel, _aot_folder)
    if not os.path.exists(path):
        return None
    try:
        spec = importlib.util.spec_from_file_location(AOT_PREFIX + name, path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    except ImportError:  # (another Python's, a broken file: numba's cache then)
        return None
    return getattr(module, name, None)


def cache_dir():
    """Where compiled kernels are cached: one folder per version of their sources,
    in the package (written at install by the warm-up) if it holds one, else
    in the user's cache."""
    package = Path(__file__).resolve().parents[1]
    digest = hashlib.sha256()
    # the layers that hold kernels and their helpers
    for path in sorted([package / "core" / "jit.py", package / "core" / "aot.py",
                        *package.glob("readers/capture/*.py"),
                        *package.glob("readers/decode/*.py"), *package.glob("kernels/*.py"),
                        *package.glob("pipeline/steps/*.py")]):
        digest.update(path.relative_to(package).as_posix().encode() + path.read_bytes())
    name = "kernels-" + digest.hexdigest()[:16]
    shipped = package / PACKAGE_CACHE / name
    if shipped.is_dir() and os.access(shipped, os.W_OK):
        return str(shipped)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    user = os.path.join(base, "tracekit", name)
    if shipped.is_dir() and not os.path.isdir(user):
        # a package this user cannot write (numba must be able to add to its
        # cache): its compiled kernels are copied, they are found by content
        shutil.copytree(shipped, user, dirs_exist_ok=True)
    return user


def _locator():
    """A numba cache locator for tracekit's kernels: the folder of cache_dir()
    named after the kernel's module path in the package (not after its
    absolute path, as numba's own: a cache made at install still matches
    when the package is copied elsewhere). Numba stamps each entry with a
    hash of the kernel's file, and the folder's name covers its helpers."""
    try:
        from numba.core.caching import CacheImpl, _CacheLocator, _SourceFileBackedLocatorMixin
    except ImportError:  # another numba: its own locator, in the same folder
        os.environ.setdefault("NUMBA_CACHE_DIR", cache_dir())
        return
    package = Path(__file__).resolve().parents[1]

    class PackageLocator(_SourceFileBackedLocatorMixin, _CacheLocator):
        def __init__(self, py_func, py_file):
            self._py_file = py_file
            self._lineno = py_func.__code__.co_firstlineno
            folder = Path(py_file).resolve().parent.relative_to(package).as_posix()
            self._cache_path = os.path.join(cache, folder.replace("/", "_"))

        def get_cache_path(self):
            return self._cache_path

        @classmethod
        def from_function(cls, py_func, py_file):
            if not Path(py_file).resolve().is_relative_to(package):
                return None
            return super().from_function(py_func, py_file)

    cache = cache_dir()
    CacheImpl._locator_classes = [PackageLocator, *(
        c for c in CacheImpl._locator_classes if c.__name__ != "PackageLocator")]


def prefer_compiled(input_bytes):
    """Use compiled kernels from now on in this process if `input_bytes` (all the
    work ahead) is worth their start-up cost."""
    global _loaded
    if use_jit(input_bytes):
        _loaded = True


def preload(load, *args, kernels=()):
    """When compiled kernels are chosen (`prefer_compiled`), start `load(*args)`
    (run the kernels the work will call, loading numba and their cached
    code) on a thread of its own, once per process: the caller goes on with
    what needs no kernel (opening the store, reading the file) meanwhile,
    and a kernel it calls before the load is done waits for it. A failure
    there is the caller's to meet when it calls the kernel itself. Nothing
    to load when all of `kernels` were compiled ahead of time (core/aot.py)."""
    global _preloading
    if not _loaded or _preloading is not None:
        return
    if kernels and all(k.ahead() is not None for k in kernels):
        return

    def run():
        try:
            load(*args)
        except Exception:  # (the same call on the caller's thread says what is wrong)
            pass

    _preloading = threading.Thread(target=run, name="tracekit-kernels", daemon=True)
    _preloading.start()


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
        self._ahead = False  # its function in the ahead-of-time module (None: none)

    def compiled(self):
        if self._compiled is None:
            with _compiling:
                if self._compiled is None:
                    self._compiled = self._dispatcher()
        return self._compiled

    def _dispatcher(self):
        from numba import njit

        _locator()

        # the same code, seeing compiled helpers (which may call each other)
        compiled = {}
        scopes = []
        for f in (*self.helpers, self.py_func):
            scope = dict(f.__globals__)
            scopes.append(scope)
            g = types.FunctionType(f.__code__, scope, f.__name__, f.__defaults__,
                                   f.__closure__)
            g.__qualname__ = f.__qualname__
            g.__module__ = f.__module__
            # helpers are inlined into the kernel (no call per packet)
            inline = "never" if f is self.py_func else "always"
            compiled[f.__name__] = njit(cache=True, nogil=True, inline=inline,
                                          _nrt=NRT)(g)
        for scope in scopes:
            scope.update({name: compiled[h.__name__] for h in self.helpers
                          for name in (h.__name__,)})
        return compiled[self.py_func.__name__]

    def signatures(self):
        """The argument types it has been compiled for in this process (none if
        it has not been)."""
        return list(self._compiled.nopython_signatures) if self._compiled is not None else []

    def ahead(self):
        """This kernel compiled ahead of time (core/aot.py), or None."""
        if self._ahead is False:
            self._ahead = aot_function(self) if _aot_enabled else None
        return self._ahead

    def __call__(self, jit, *args):
        if jit:
            global _loaded
            _loaded = True
        # built ahead, it costs no start-up: small inputs too run it, unless
        # TRACEKIT_JIT says how to run
        if jit or os.environ.get("TRACEKIT_JIT", "auto") == "auto":
            ahead = self.ahead()
            if ahead is not None:
                try:
                    return ahead(*args)
                except TypeError:  # arguments of other types than it was built for
                    self._ahead = None
        if jit:
            return self.compiled()(*args)
        with np.errstate(over="ignore"):  # uint64 hashing wraps, as in compiled code
            return self.py_func(*args)


def kernel(fn=None, *, helpers=()):
    """Decorator: `@kernel` or `@kernel(helpers=(f, g))`."""
    if fn is None:
        return lambda f: Kernel(f, helpers)
    return Kernel(fn, helpers)
