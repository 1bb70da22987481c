"""Small numpy helpers the readers share.

`np.unique` without its optional outputs asks `np.ma.is_masked`, and the
first such call imports numpy.ma: 9-16 ms of every ingest's start-up
(measured 2026-12-07 on the 200 k slice: numpy.ma was the last import on
ingest's path). The readers ask for distinct values through `distinct`.
"""

import numpy as np


def distinct(values):
    """The sorted distinct values of a 1-D array (np.unique's plain result)."""
    values = np.sort(np.asarray(values).ravel())
    if len(values) < 2:
        return values
    keep = np.empty(len(values), bool)
    keep[0] = True
    np.not_equal(values[1:], values[:-1], out=keep[1:])
    return values[keep]
