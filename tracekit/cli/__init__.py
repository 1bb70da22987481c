"""The `tracekit` command (the faces' floor: it calls the library, tracekit.api,
and the presentation layer, and prints)."""

import gc
import os

# Start-up of a CLI process (the library itself leaves these alone):
# - numpy's OpenBLAS starts a thread per core at import, and they spin while
#   they start: 0.07-0.08 CPU s of every command (`python -c "import numpy"`:
#   0.15 -> 0.07 CPU s). tracekit does no linear algebra, so one thread.
# - the imports make objects that live as long as the process; the cyclic
#   collector would walk them again and again while they are made (45 young
#   and 4 older collections before the first command runs), so it waits until
#   they are made and then leaves them out of its walks (gc.freeze).
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
gc.disable()
try:
    from .app import main, run
finally:
    gc.freeze()
    gc.enable()

__all__ = ["main", "run"]
