"""The visualiser: an instrumented execution model of the ladder and its renderers (GIF, HTML, terminal)."""

from .model import Mark, ModelError, NoModelError, Trace
from .rungs import MODELS, default_size, model_for, resolve, run

__all__ = ["MODELS", "Mark", "ModelError", "NoModelError", "Trace", "default_size", "model_for", "resolve", "run"]
