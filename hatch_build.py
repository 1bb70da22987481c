"""Wheel build hook: the wheel carries its kernels compiled (no first-run penalty).

`pip install .` builds a wheel on the machine it installs on; this hook runs
the warm-up (tracekit.pipeline.warmup --into-package) on the sample captures
and puts tracekit/_kernels/kernels-<hash of the kernels' sources> into the
wheel, where tracekit.core.jit finds it. Numba's cache entries hold the CPU
they were compiled for: on another CPU, or after a source changes (another
hash), the kernels compile on first use as without this hook.

It needs numba, duckdb and pyarrow in the build environment (pyproject's
build-system requires them, so pip's isolated build has them); if they or
the samples are missing, or the warm-up fails, the hook says so and the
kernels compile on first use. Editable installs are skipped (`make setup`
warms the source tree up).
"""

import os
import subprocess
import sys
from pathlib import Path

from hatchling.builders.hooks.plugin.interface import BuildHookInterface

SAMPLES = ("captures/lossy-download-server.pcap", "captures/udp-echo.pcapng")


class KernelCacheHook(BuildHookInterface):
    PLUGIN_NAME = "custom"

    def initialize(self, version, build_data):
        if version == "editable" or os.environ.get("TRACEKIT_NO_PRECOMPILE"):
            return
        root = Path(self.root)
        samples = [str(root / s) for s in SAMPLES]
        try:
            import duckdb, numba, pyarrow  # noqa: F401,E401
        except ImportError:
            self.app.display_warning("tracekit: numba is not in the build environment; the "
                                     "kernels compile on first use")
            return
        if not all(os.path.exists(s) for s in samples):
            self.app.display_warning("tracekit: no sample captures; kernels compile on first use")
            return
        env = {**os.environ, "PYTHONPATH": str(root)}
        run = subprocess.run([sys.executable, "-m", "tracekit.pipeline.warmup", "--into-package",
                              *samples], cwd=root, env=env, capture_output=True, text=True)
        if run.returncode != 0:
            last = (run.stderr.strip().splitlines() or ["?"])[-1]
            self.app.display_warning(f"tracekit: kernels not compiled ({last}); they compile "
                                     "on first use")
            return
        folder = Path(run.stdout.strip().splitlines()[-1].split(" into ", 1)[1])
        build_data["force_include"][str(folder)] = f"tracekit/_kernels/{folder.name}"
