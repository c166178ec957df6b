"""What the smoke job needs beside torch, checked before anything starts, so a missing package
is one line naming the install command rather than a traceback deep in a rank.

numpy: torch.distributed's object collectives (all_gather_object, broadcast_object_list, which
the job and torch.distributed.checkpoint use) convert through it; without it torch imports
fine and the first collective dies with "Numpy is not available". Standard library only at
import time (the launcher imports this without torch)."""

from __future__ import annotations

import importlib.util
import sys

NUMPY_INSTALL = "pip install numpy"
_WHY = "torch.distributed's object collectives and torch.distributed.checkpoint convert through it"


def numpy_missing() -> str | None:
    """Without importing anything: why numpy cannot be imported by this Python, or None."""
    try:
        spec = importlib.util.find_spec("numpy")
    except (ImportError, ValueError):
        spec = None
    if spec is None:
        return f"numpy is not installed for {sys.executable} ({_WHY}): {NUMPY_INSTALL}"
    return None


def numpy_problem() -> str | None:
    """Why torch cannot use numpy in this process (missing, or one torch fails to load), or
    None. Imports numpy and torch."""
    try:
        numpy = importlib.import_module("numpy")  # torch's dependency, not validators' own
    except ImportError:
        return f"numpy is not installed for {sys.executable} ({_WHY}): {NUMPY_INSTALL}"
    import torch

    try:
        torch.zeros(1).numpy()
    except RuntimeError as exc:  # torch's "Numpy is not available": a numpy it cannot load
        version = getattr(numpy, "__version__", "?")
        return (
            f"torch {torch.__version__} cannot use numpy {version} ({exc}; {_WHY}): "
            f"{NUMPY_INSTALL} in a version this torch supports"
        )
    return None
