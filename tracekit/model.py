"""The closed-form models of the timing model, under their public name:
`tracekit.model` is `tracekit.core.model` (docs/timing-model.md)."""

from .core.model import *  # noqa: F401,F403
