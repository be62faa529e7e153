"""HF-format directories: ``config.json`` + ``model.safetensors`` or ``pytorch_model.bin``, each possibly sharded.

Reading never executes pickled code: safetensors first, else ``torch.load(weights_only=True)``.
A sharded checkpoint's index (``*.index.json``) may only name shard files inside the checkpoint
folder (see :func:`shard_files`). Writing is atomic per file and produces what HF transformers'
``Bert*`` classes load (``Roberta*`` / ``XLMRoberta*`` / ``Camembert*`` for a ``"roberta"`` family model, under
those checkpoints' names: :data:`bertkit.weights.tables.HF_FAMILY_TABLES`).
"""

from __future__ import annotations

import json
import os
import pickle
import warnings
from collections.abc import Callable
from pathlib import Path, PurePosixPath, PureWindowsPath
from typing import Any

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

from bertkit.config import BERTConfig
from bertkit.io import atomic_write, atomic_write_text, check_link, read_json
from bertkit.modeling.fast import Linear
from bertkit.modeling.quantization import dequantized_message
from bertkit.weights import int8
from bertkit.weights.adapt import LoadWarning, load_into, tied_aliases
from bertkit.weights.tables import bertkit_to_hf_family, hf_names_key, separate_decoder_bias

CONFIG_NAME = "config.json"
SAFETENSORS_NAME = "model.safetensors"
SAFETENSORS_INDEX_NAME = "model.safetensors.index.json"
TORCH_NAME = "pytorch_model.bin"
TORCH_INDEX_NAME = "pytorch_model.bin.index.json"
#: the weight files of an HF directory, in the order they are looked for
WEIGHT_NAMES = (SAFETENSORS_NAME, SAFETENSORS_INDEX_NAME, TORCH_NAME, TORCH_INDEX_NAME)
#: ``from_pretrained(dtype=...)``
LOAD_DTYPES = (None, "auto", "fp32", "int8")


def read_config(directory: str | os.PathLike) -> BERTConfig:
    path = Path(directory) / CONFIG_NAME
    if not path.is_file():
        raise FileNotFoundError(f"{directory} has no {CONFIG_NAME}; expected a directory written by "
                                "save_pretrained (bertkit or HF transformers).")
    return BERTConfig.from_json_file(path)


def has_weights(directory: str | os.PathLike) -> bool:
    """Whether ``directory`` holds an HF-format weights file or shard index (:data:`WEIGHT_NAMES`)."""
    return any((Path(directory) / name).is_file() for name in WEIGHT_NAMES)


def read_state_dict(directory: str | os.PathLike) -> dict[str, torch.Tensor]:
    """All tensors of the checkpoint in ``directory`` (safetensors preferred, sharded or not), on CPU."""
    d = Path(directory)
    if (d / SAFETENSORS_NAME).is_file():
        return load_safetensors(d / SAFETENSORS_NAME)
    if (d / SAFETENSORS_INDEX_NAME).is_file():
        return read_sharded(d / SAFETENSORS_INDEX_NAME, load_safetensors)
    if (d / TORCH_NAME).is_file():
        return load_torch_file(d / TORCH_NAME)
    if (d / TORCH_INDEX_NAME).is_file():
        return read_sharded(d / TORCH_INDEX_NAME, load_torch_file)
    raise FileNotFoundError(f"{directory} holds no weights: expected one of {', '.join(WEIGHT_NAMES)}.")


def read_sharded(index_path: Path, load: Callable[[Path], dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
    """The tensors of every shard :func:`shard_files` finds in ``index_path``, read with ``load``.

    Raises ``ValueError`` naming the index when it is damaged or unsafe, or when a tensor it
    lists is in none of the shards.
    """
    weight_map, shards = shard_files(index_path)
    state: dict[str, torch.Tensor] = {}
    for shard in shards:
        state.update(load(shard))
    absent = [name for name in weight_map if name not in state]
    if absent:
        shown = ", ".join(f"{n} ({weight_map[n]})" for n in absent[:5])
        raise ValueError(f"{index_path} lists tensors its shards do not hold: {shown}"
                         f"{f' ... ({len(absent)} in all)' if len(absent) > 5 else ''}; a shard is incomplete "
                         "or from another checkpoint. Download the checkpoint again.")
    return state


def shard_files(index_path: Path) -> tuple[dict[str, str], list[Path]]:
    """Parse a sharded checkpoint's index: its ``weight_map`` and the shard files it names, checked.

    A shard entry must be a relative file name that stays inside the index's folder: an absolute
    path, a ``..`` component, or a link that resolves outside the folder is refused
    (``ValueError`` naming the entry), so an index cannot make bertkit read other files. Links into
    the Hugging Face hub cache's ``blobs/`` folder (beside the ``snapshots/`` folder holding the
    checkpoint) are allowed: the hub cache stores every file that way. Malformed JSON, a missing or
    ill-typed ``weight_map`` and a missing shard are ``ValueError`` naming the index file.
    """
    index = read_json(index_path, "a sharded checkpoint's index (download it again)")
    weight_map = index.get("weight_map") if isinstance(index, dict) else None
    if not isinstance(weight_map, dict) or not weight_map \
            or not all(isinstance(k, str) and isinstance(v, str) for k, v in weight_map.items()):
        raise ValueError(f'{index_path} has no "weight_map" mapping tensor names to shard file names (a sharded '
                         "checkpoint's index, as HF transformers writes it, has one); the file is damaged or not "
                         "an index.")
    folder = index_path.parent
    allowed = [folder.resolve(), *_hub_blob_folders(folder)]
    shards = []
    for entry in sorted(set(weight_map.values())):
        if not entry or PurePosixPath(entry).is_absolute() or PureWindowsPath(entry).is_absolute() \
                or PureWindowsPath(entry).drive or ".." in PureWindowsPath(entry).parts:
            raise ValueError(f"{index_path}: refusing shard entry {entry!r}: shard paths must be file names inside "
                             f"{folder} (no absolute paths, no '..'); the index is damaged or malicious.")
        path = folder / entry
        resolved = path.resolve()
        if not any(resolved.is_relative_to(root) for root in allowed):
            raise ValueError(f"{index_path}: refusing shard entry {entry!r}: it is a link to {resolved}, outside "
                             f"{folder}; shard files must be inside the checkpoint folder.")
        if not resolved.is_file():
            raise ValueError(f"{index_path} names the shard {entry!r}, which is not in {folder}; the download is "
                             "incomplete. Download the missing shard (or the whole checkpoint) again.")
        shards.append(path)
    return weight_map, shards


def _hub_blob_folders(folder: Path) -> list[Path]:
    """``<repo>/blobs`` when ``folder`` is inside ``<repo>/snapshots/`` of a Hugging Face hub cache."""
    resolved = folder.resolve()
    return [p.parent / "blobs" for p in (resolved, *resolved.parents) if p.name == "snapshots"][:1]


def load_safetensors(path: str | os.PathLike) -> dict[str, torch.Tensor]:
    check_link(path)
    try:
        return load_file(str(path))
    except (SafetensorError, OSError) as e:
        raise ValueError(f"{path} is not a readable safetensors file ({e}); it may be truncated or corrupt.") from e


def load_torch_file(path: str | os.PathLike, nested: bool = False) -> dict:
    """A PyTorch pickle of tensors, loaded with ``weights_only=True`` (nothing in it is executed).

    ``nested=True`` accepts any dict (a training checkpoint holding the weights under a key). A
    symbolic link that does not resolve is an ``OSError`` naming it (:func:`bertkit.io.check_link`).
    """
    check_link(path)
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


def load_pretrained(self_or_cls, source: str | os.PathLike, config_overrides: dict[str, Any], *,
                    strict: bool = True, warn: bool = True):
    """Implementation of ``from_pretrained`` (see :meth:`BERTPreTrainedModel.from_pretrained`).

    ``strict`` and ``warn`` are :func:`bertkit.weights.adapt.load_into`'s: ``strict=False`` also
    drops an unexpected head that matches no known BERT head (``score.*``) instead of refusing
    it; ``warn=False`` silences the :class:`~bertkit.weights.adapt.LoadWarning` s (the report
    is still in ``model.load_report``). ``dtype`` (None / ``"auto"``, ``"fp32"``, ``"int8"``): an int8
    checkpoint (:mod:`bertkit.weights.int8`) loads with int8 kernels unless ``"fp32"`` asks for its
    dequantized float weights (a warning says so); ``"int8"`` quantizes any checkpoint; a float checkpoint
    otherwise loads as it is. They may also arrive inside ``config_overrides``
    (``from_pretrained`` forwards its keyword arguments there): they are taken out before the
    rest overrides the config. So may ``task``: the task adapter of a Jina embeddings v3 checkpoint in its original
    layout, merged into the weights (:mod:`bertkit.weights.task_adapters`).
    """
    from bertkit.weights.formats import read_checkpoint

    config_overrides = dict(config_overrides)
    strict = config_overrides.pop("strict", strict)
    warn = config_overrides.pop("warn", warn)
    dtype = config_overrides.pop("dtype", None)
    checkpoint = read_checkpoint(source, task=config_overrides.pop("task", None))
    if isinstance(self_or_cls, type):
        config = checkpoint.config.replace(**config_overrides) if config_overrides else checkpoint.config
        model = self_or_cls(config)
    else:
        if config_overrides:
            raise ValueError(f"config overrides {sorted(config_overrides)} apply when building a model; "
                             f"call {type(self_or_cls).__name__}.from_pretrained(...) on the class instead.")
        model = self_or_cls
        if checkpoint.config.family != model.config.family:  # same names inside, other positions / heads
            raise ValueError(f"{source}: the checkpoint is family {checkpoint.config.family!r} "
                             f"(model_type {checkpoint.config.hf_model_type!r}) but this {type(model).__name__} "
                             f"is family {model.config.family!r}; build the model from the checkpoint with "
                             f"{type(model).__name__}.from_pretrained(...) on the class.")
    load_into(model, checkpoint.state_dict, strict=strict, warn=warn, source=source)
    return apply_load_dtype(model.eval(), checkpoint.quantization, dtype, source, warn, plan=checkpoint.int8_plan)


def apply_load_dtype(model, quantization: dict | None, dtype: str | None, source, warn: bool = True,
                     plan: int8.PlanState | None = None):
    """What every loader does last (``from_pretrained``, :func:`bertkit.tasks.sources.load_source`): the loaded
    ``model`` in ``dtype``: None / ``"auto"``: int8 for an int8 checkpoint, as it is otherwise;
    ``"int8"``: int8 kernels; ``"fp32"``: the float32 weights (dequantized ones, with a warning, for an int8
    checkpoint). An int8 checkpoint's block is kept in ``model.quantization`` and a static one's ``plan``
    (named as ``model``'s layers) in ``model.int8_plan``, so that saving keeps the format and int8 runs the
    plan's static kernels. A plan this bertkit cannot run (another method version) is a ValueError naming
    ``source``."""
    if dtype not in LOAD_DTYPES:
        raise ValueError(f"dtype must be one of {LOAD_DTYPES}, got {dtype!r}.")
    model.quantization = quantization
    model.int8_plan = None if plan is None else int8.fitted_plan(plan, model)
    if dtype == "int8" or (quantization is not None and dtype in (None, "auto")):
        try:
            model.optimize_for_inference(quantize="int8")  # loaders build models on the CPU, where int8 runs
        except ValueError as error:
            if plan is None:
                raise
            raise ValueError(f"{source}: {error}") from None  # the plan's own words, with the file they are about
    elif quantization is not None and warn:
        warnings.warn(dequantized_message(source), LoadWarning, stacklevel=3)
    return model


def _hf_plan(model) -> int8.PlanState | None:
    """``model.int8_plan`` (an ``Int8Plan`` or a loaded :class:`~bertkit.weights.int8.PlanState`; None: dynamic
    int8) with its layers under the checkpoint's (HF) names."""
    plan = getattr(model, "int8_plan", None)
    if plan is None:
        return None
    state = int8.PlanState(*plan.to_state())
    hf_names = bertkit_to_hf_family({name: name for name in state.meta["layers"]}, hf_names_key(model.config))
    return int8.renamed_plan(state, {old: new for new, old in hf_names.items()})


def save_pretrained(model, directory: str | os.PathLike, dtype: str | None = None) -> None:
    """Write ``config.json`` and ``model.safetensors`` into ``directory`` (created if needed).

    ``dtype``: ``"fp32"`` writes the float weights; ``"int8"`` an int8 checkpoint (:mod:`bertkit.weights.int8`:
    every dense layer's weight int8 with its float32 scales, the rest float32), which loads as the model that
    ``optimize_for_inference(quantize="int8")`` makes of this one, bit for bit; a model carrying a static int8
    plan (``model.int8_plan``: :func:`bertkit.inference.int8_plan.calibrate`'s) is written as static int8
    (format version 2: the plan's int8 layers quantized, its float ones float32, the plan beside them). None
    writes what the model was loaded from (int8 for an int8 checkpoint's model, float otherwise).
    """
    dtype = int8.check_dtype(dtype)
    if dtype is None:
        saved_int8 = getattr(model, "quantization", None) is not None or getattr(model, "int8_plan", None) is not None
        dtype = "int8" if saved_int8 else "fp32"
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    aliases = tied_aliases(model)
    state = {k: v.detach().contiguous().cpu() for k, v in model.state_dict().items() if k not in aliases}
    if not model.config.tie_word_embedding and separate_decoder_bias(model.config.family):
        # HF (v5) unties decoder.bias with the weight and reads it
        state.update({k: v.detach().cpu().clone() for k, v in model.state_dict().items()
                      if k in aliases and k.endswith("predictions.decoder.bias")})
    dense = [f"{name}.weight" for name, module in model.named_modules()
             if isinstance(module, Linear) and f"{name}.weight" in state]
    state = bertkit_to_hf_family(state, hf_names_key(model.config))  # RoBERTa: roberta.* / lm_head.*
    if not model.config.tie_word_embedding:  # HF (v5) unties decoder.bias with the weight and reads it
        untied = {k: v.detach().cpu().clone() for k, v in model.state_dict().items()
                  if k in aliases and k.endswith("predictions.decoder.bias")}
        for name, tensor in bertkit_to_hf_family(untied, hf_names_key(model.config)).items():
            state.setdefault(name, tensor)  # unless the family's HF names hold one bias (ModernBERT's decoder.bias)
    config = model.config.to_hf_dict(architecture=model.hf_architecture)
    if dtype == "int8":
        hf_dense = bertkit_to_hf_family(dict.fromkeys(dense), hf_names_key(model.config))
        state, config[int8.KEY] = int8.quantize_state(state, [name.removesuffix(".weight") for name in hf_dense],
                                                      _hf_plan(model))
    atomic_write(d / SAFETENSORS_NAME, lambda tmp: save_file(state, tmp, metadata={"format": "pt"}))
    atomic_write_text(d / CONFIG_NAME, json.dumps(config, indent=2, sort_keys=True) + "\n")
