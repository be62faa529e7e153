"""Checkpoints: one directory per step, written atomically, rotated, discovered and loaded back.

Layout under ``output_dir/checkpoints/``::

    step-00001000/
        model.safetensors   the model's state_dict (tied tensors stored once), via safetensors
        state.pt            everything else, a dict of tensors / primitives / lists / dicts only,
                            written with torch.save and read with ``torch.load(weights_only=True)``

A checkpoint is assembled in a hidden temporary directory beside its final place,
each file fsynced, and then renamed into place: a ``step-*`` directory is always
complete, and a crash mid-save leaves only a ``.tmp-*`` directory that the next save
removes. A full disk raises ``OSError(ENOSPC)`` naming the checkpoint and the previous
one, which stays intact. What goes into ``state.pt`` is the trainer's business; this module also has
the helpers for the pieces every trainer needs (RNG states, ``state_dict`` of arbitrary
data objects).
"""

from __future__ import annotations

import os
import random
import re
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors.torch import load_model, save_model
from torch import nn

from bertkit.io import atomic_write, is_disk_full, make_temp_dir

CHECKPOINTS = "checkpoints"
MODEL_FILE = "model.safetensors"
STATE_FILE = "state.pt"
_NAME = re.compile(r"^step-(\d+)$")


def checkpoint_root(output_dir: str | os.PathLike) -> Path:
    return Path(output_dir) / CHECKPOINTS


def save_checkpoint(output_dir: str | os.PathLike, step: int, model: nn.Module, state: dict[str, Any]) -> Path:
    """Write ``model`` and ``state`` as checkpoint ``step`` atomically; returns its directory.

    ``state`` must hold only what ``torch.load(weights_only=True)`` accepts (tensors,
    numbers, strings, None, lists, tuples, dicts). An existing checkpoint of the same step
    is left as it is (``FileExistsError`` is not raised: the same step means the same state).
    """
    root = checkpoint_root(output_dir)
    root.mkdir(parents=True, exist_ok=True)
    final = root / f"step-{step:08d}"
    if final.exists():
        return final
    for stale in root.glob(".tmp-*"):  # left by a save that crashed
        shutil.rmtree(stale, ignore_errors=True)
    tmp = Path(make_temp_dir(root, prefix=f".tmp-{final.name}-"))
    try:
        try:
            atomic_write(tmp / MODEL_FILE, lambda path: save_model(model, path))
            atomic_write(tmp / STATE_FILE, lambda path: torch.save(state, path))
        except OSError as error:
            if not is_disk_full(error):
                raise
            previous = latest_checkpoint(output_dir)
            kept = f"the previous checkpoint {previous} is intact" if previous else "no earlier checkpoint exists"
            raise OSError(error.errno, f"checkpoint {final} was not written: {error.strerror}; {kept}") from error
        os.replace(tmp, final)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    _fsync_dir(root)
    return final


def load_checkpoint(path: str | os.PathLike, model: nn.Module | None = None) -> dict[str, Any]:
    """Load the weights into ``model`` (strict) and return ``state.pt`` (read with ``weights_only=True``)."""
    path = Path(path)
    if not (path / STATE_FILE).is_file() or not (path / MODEL_FILE).is_file():
        raise FileNotFoundError(f"{path} is not a checkpoint directory (needs {MODEL_FILE} and {STATE_FILE}).")
    if model is not None:
        device = next((p.device for p in model.parameters()), torch.device("cpu"))
        load_model(model, path / MODEL_FILE, strict=True, device=str(device))
    return torch.load(path / STATE_FILE, map_location="cpu", weights_only=True)


def rewrite_checkpoint_states(output_dir: str | os.PathLike, change: Callable[[dict[str, Any]], None]) -> None:
    """Apply ``change`` to the saved state (:data:`STATE_FILE`) of every checkpoint in ``output_dir`` and write it
    back atomically: converting a run written under an older meaning of a setting."""
    for path in list_checkpoints(output_dir):
        state = torch.load(path / STATE_FILE, map_location="cpu", weights_only=True)
        change(state)
        atomic_write(path / STATE_FILE, lambda target, state=state: torch.save(state, target))


def list_checkpoints(output_dir: str | os.PathLike) -> list[Path]:
    """The complete checkpoints under ``output_dir``, oldest (lowest step) first."""
    root = checkpoint_root(output_dir)
    if not root.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in root.iterdir() if (m := _NAME.match(p.name)) and p.is_dir()]
    return [p for _, p in sorted(found)]


def latest_checkpoint(output_dir: str | os.PathLike) -> Path | None:
    """The checkpoint with the highest step, or None."""
    found = list_checkpoints(output_dir)
    return found[-1] if found else None


def resolve_checkpoint(resume_from: str | os.PathLike | None, output_dir: str | os.PathLike) -> Path | None:
    """``None`` → None; ``"latest"`` → the newest checkpoint in ``output_dir`` (None if there is none
    yet, so a preemptible job can always pass it); a path → that checkpoint (``FileNotFoundError`` if absent)."""
    if resume_from is None:
        return None
    if resume_from == "latest":
        return latest_checkpoint(output_dir)
    path = Path(resume_from)
    if not path.is_dir():
        raise FileNotFoundError(f"resume_from={os.fspath(resume_from)!r}: no such checkpoint directory.")
    return path


def rotate_checkpoints(output_dir: str | os.PathLike, keep_last: int | None) -> list[Path]:
    """Delete all but the newest ``keep_last`` checkpoints (None keeps all); returns what was removed."""
    if keep_last is None:
        return []
    found = list_checkpoints(output_dir)
    removed = found[:-keep_last] if len(found) > keep_last else []
    for path in removed:
        shutil.rmtree(path)
    return removed


def step_of(path: str | os.PathLike) -> int:
    match = _NAME.match(Path(path).name)
    if not match:
        raise ValueError(f"{path} is not named like a checkpoint (step-NNNNNNNN).")
    return int(match.group(1))


def _fsync_dir(path: Path) -> None:
    """Make a rename durable; not possible (nor needed) on every platform."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


# ---------------------------------------------------------------------- RNG and data objects
def rng_state() -> dict[str, Any]:
    """Python, NumPy, torch CPU and CUDA generator states, in weights_only-loadable form."""
    name, keys, pos, has_gauss, cached = np.random.get_state()
    state = {"python": random.getstate(), "torch": torch.get_rng_state(),
             "numpy": {"name": name, "keys": torch.from_numpy(keys.astype(np.int64)), "pos": int(pos),
                       "has_gauss": int(has_gauss), "cached_gaussian": float(cached)}}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    """Inverse of :func:`rng_state`."""
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    n = state["numpy"]
    np.random.set_state((n["name"], n["keys"].numpy().astype(np.uint32), n["pos"], n["has_gauss"],
                         n["cached_gaussian"]))
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def object_state(obj: Any) -> Any:
    """``obj.state_dict()``, a ``torch.Generator``'s state, or None for stateless objects."""
    if isinstance(obj, torch.Generator):
        return obj.get_state()
    if callable(getattr(obj, "state_dict", None)):
        return obj.state_dict()
    return None


def load_object_state(obj: Any, state: Any) -> None:
    """Inverse of :func:`object_state` (a None state is ignored)."""
    if state is None:
        return
    if isinstance(obj, torch.Generator):
        obj.set_state(state)
    else:
        obj.load_state_dict(state)
