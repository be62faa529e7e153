"""HF-format directories: ``config.json`` + ``model.safetensors`` (sharded too) or ``pytorch_model.bin``.

Reading never executes pickled code: safetensors first, else ``torch.load(weights_only=True)``.
Writing is atomic per file and produces what HF transformers' ``Bert*`` classes load.
"""

from __future__ import annotations

import json
import os
import pickle
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

from bertkit.config import BERTConfig
from bertkit.io import atomic_write, atomic_write_text
from bertkit.weights.adapt import adapt_state_dict, tied_aliases

CONFIG_NAME = "config.json"
SAFETENSORS_NAME = "model.safetensors"
SAFETENSORS_INDEX_NAME = "model.safetensors.index.json"
TORCH_NAME = "pytorch_model.bin"


def read_config(directory: str | os.PathLike) -> BERTConfig:
    path = Path(directory) / CONFIG_NAME
    if not path.is_file():
        raise FileNotFoundError(f"{directory} has no {CONFIG_NAME}; expected a directory written by "
                                "save_pretrained (bertkit or HF transformers).")
    return BERTConfig.from_json_file(path)


def read_state_dict(directory: str | os.PathLike) -> dict[str, torch.Tensor]:
    """All tensors of the checkpoint in ``directory`` (safetensors preferred), on CPU."""
    d = Path(directory)
    if (d / SAFETENSORS_NAME).is_file():
        return load_safetensors(d / SAFETENSORS_NAME)
    if (d / SAFETENSORS_INDEX_NAME).is_file():
        index = json.loads((d / SAFETENSORS_INDEX_NAME).read_text(encoding="utf-8"))
        state: dict[str, torch.Tensor] = {}
        for shard in sorted(set(index["weight_map"].values())):
            state.update(load_safetensors(d / shard))
        return state
    if (d / TORCH_NAME).is_file():
        return load_torch_file(d / TORCH_NAME)
    raise FileNotFoundError(f"{directory} holds no weights: expected {SAFETENSORS_NAME}, "
                            f"{SAFETENSORS_INDEX_NAME} or {TORCH_NAME}.")


def load_safetensors(path: str | os.PathLike) -> dict[str, torch.Tensor]:
    try:
        return load_file(str(path))
    except (SafetensorError, OSError) as e:
        raise ValueError(f"{path} is not a readable safetensors file ({e}); it may be truncated or corrupt.") from e


def load_torch_file(path: str | os.PathLike, nested: bool = False) -> dict:
    """A PyTorch pickle of tensors, loaded with ``weights_only=True`` (nothing in it is executed).

    ``nested=True`` accepts any dict (a training checkpoint holding the weights under a key).
    """
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as e:
        raise ValueError(f"{path} was refused: it holds objects other than tensors, and loading it "
                         f"could run code ({str(e).splitlines()[0]}). Convert it to safetensors in a "
                         "trusted environment.") from e
    except (RuntimeError, EOFError) as e:
        raise ValueError(f"{path} is not a readable PyTorch checkpoint ({e}); it may be truncated or corrupt.") from e
    if not isinstance(state, dict) or not (nested or all(isinstance(v, torch.Tensor) for v in state.values())):
        raise ValueError(f"{path} does not hold a state dict (a mapping of names to tensors).")
    return state


def load_pretrained(self_or_cls, source: str | os.PathLike, config_overrides: dict[str, Any]):
    """Implementation of ``from_pretrained`` (see :meth:`BERTPreTrainedModel.from_pretrained`)."""
    from bertkit.weights.formats import read_checkpoint

    checkpoint = read_checkpoint(source)
    if isinstance(self_or_cls, type):
        config = checkpoint.config.replace(**config_overrides) if config_overrides else checkpoint.config
        model = self_or_cls(config)
    else:
        if config_overrides:
            raise ValueError(f"config overrides {sorted(config_overrides)} apply when building a model; "
                             f"call {type(self_or_cls).__name__}.from_pretrained(...) on the class instead.")
        model = self_or_cls
    fitted, report = adapt_state_dict(model, checkpoint.state_dict)
    model.load_state_dict(fitted, strict=False)
    model.tie_weights()
    model.load_report = report
    return model.eval()


def save_pretrained(model, directory: str | os.PathLike) -> None:
    """Write ``config.json`` and ``model.safetensors`` into ``directory`` (created if needed)."""
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    aliases = tied_aliases(model)
    state = {k: v.detach().contiguous().cpu() for k, v in model.state_dict().items() if k not in aliases}
    if not model.config.tie_word_embedding:  # HF (v5) unties decoder.bias with the weight and reads it
        state.update({k: v.detach().cpu().clone() for k, v in model.state_dict().items()
                      if k in aliases and k.endswith("predictions.decoder.bias")})
    atomic_write(d / SAFETENSORS_NAME, lambda tmp: save_file(state, tmp, metadata={"format": "pt"}))
    config = model.config.to_hf_dict(architecture=model.hf_architecture)
    atomic_write_text(d / CONFIG_NAME, json.dumps(config, indent=2, sort_keys=True) + "\n")
