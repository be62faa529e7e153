"""Reading any BERT checkpoint: HF directories, PyTorch archives, Google TF1 checkpoints, archives of them.

:func:`read_checkpoint` sniffs ``source`` — a directory, a weights file, a TF checkpoint
prefix, or a ``.zip`` / ``.tar.gz`` holding one — and returns a :class:`Checkpoint` with
HF parameter names. What each format brings:

=====================  ========================================================================
HF / bertkit           ``config.json`` + ``model.safetensors`` or ``pytorch_model.bin`` (each sharded too)
pytorch_pretrained_bert ``bert_config.json`` + ``pytorch_model.bin`` (2018 ``gamma``/``beta`` names)
Google TF1             ``bert_config.json`` + ``bert_model.ckpt.index`` / ``.data-*`` (no TensorFlow needed)
lucid 2.x, NVIDIA      safetensors / ``.pt`` with their own names (``layernorm``, ``dense_act``)
=====================  ========================================================================

Renames other than TF's are applied when the state dict is fitted to a model
(:mod:`bertkit.weights.adapt`). Pickles are only ever read with ``weights_only=True``. An int8 checkpoint
(:mod:`bertkit.weights.int8`) is dequantized on reading; ``Checkpoint.quantization`` says it was one.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from bertkit.config import BERTConfig
from bertkit.io import check_link, read_json_object
from bertkit.weights import hf, int8, task_adapters
from bertkit.weights.archive import safe_extract
from bertkit.weights.tables import hf_family_to_bertkit, tf_to_hf

CONFIG_NAMES = ("config.json", "bert_config.json")
TOKENIZER_FILES = ("vocab.txt", "tokenizer_config.json", "special_tokens_map.json", "tokenizer.json")
TORCH_SUFFIXES = (".bin", ".pt", ".pth")
ARCHIVE_SUFFIXES = (".zip", ".tar.gz", ".tgz", ".tar")


@dataclass
class Checkpoint:
    """A checkpoint in memory: its config, its tensors under bertkit's names (BERT's HF names, whatever the
    family: a RoBERTa checkpoint's are renamed on reading), and its tokenizer files."""

    config: BERTConfig
    state_dict: dict[str, torch.Tensor]
    format: str  # "hf", "pytorch", "tf1"
    architecture: str | None = None  # the HF class named in config.json, if any
    tokenizer_files: dict[str, bytes] = field(default_factory=dict)
    vocab_file: Path | None = None  # set when the source is a directory or file on disk
    #: an int8 checkpoint's ``"quantization"`` block (:mod:`bertkit.weights.int8`); its weights are dequantized
    quantization: dict | None = None
    #: a static int8 checkpoint's plan (format version 2), its layers under bertkit's names
    int8_plan: int8.PlanState | None = None


def read_checkpoint(source: str | os.PathLike, *, verify: bool = True, task: str | None = None) -> Checkpoint:
    """Read the checkpoint at ``source`` (see the module doc); errors name the file and the problem.

    ``task``: the task adapter to merge into the weights of a Jina embeddings v3 checkpoint in its original layout
    (:mod:`bertkit.weights.task_adapters`; None: its base weights); a ValueError for any other checkpoint."""
    path = Path(source)
    check_link(path)
    if path.is_file() and path.name.endswith(ARCHIVE_SUFFIXES):
        return _read_archive(path, verify, task)
    if path.is_dir():
        return _read_directory(path, verify, task)
    if path.with_name(path.name + ".index").is_file() or (path.is_file() and path.suffix == ".index"):
        prefix = path.with_suffix("") if path.suffix == ".index" else path
        return _with_config(_read_tf(prefix, verify), prefix.parent, "tf1", task)
    if path.is_file() and path.name.endswith((".safetensors", *TORCH_SUFFIXES)):
        return _with_config(_read_torch(path), path.parent, "pytorch", task)
    if not path.exists():
        from bertkit.weights.download import missing_source

        hub = missing_source(source)  # a name that looks like a Hub id: where bertkit looked, how to fetch it
        if hub is not None:
            raise FileNotFoundError(hub)
    raise FileNotFoundError(f"{source} is not a checkpoint bertkit can find: expected a directory, a weights "
                            "file (.safetensors/.bin/.pt), a TF checkpoint prefix (with .index), or a "
                            ".zip/.tar.gz archive of one.")


# ---------------------------------------------------------------------------- per source kind

def _read_directory(d: Path, verify: bool, task: str | None = None) -> Checkpoint:
    for file in d.iterdir():  # a weights file or config that is a broken link is named, not passed over
        if file.name in (*hf.WEIGHT_NAMES, *CONFIG_NAMES) or file.name.endswith((".safetensors", *TORCH_SUFFIXES)):
            check_link(file)
    if hf.has_weights(d):
        return _with_config(_unwrap(hf.read_state_dict(d)), d, "hf", task)
    tf_indexes = sorted(d.glob("*.ckpt*.index")) or sorted(d.glob("*.index"))
    if tf_indexes:
        return _with_config(_read_tf(tf_indexes[0].with_suffix(""), verify), d, "tf1", task)
    others = sorted(p for p in d.iterdir() if p.name.endswith((".safetensors", *TORCH_SUFFIXES)))
    if others:
        return _with_config(_read_torch(others[0]), d, "pytorch", task)
    subdirs = [p for p in d.iterdir() if p.is_dir()]
    if len(subdirs) == 1 and not any(p.is_file() and p.name in CONFIG_NAMES for p in d.iterdir()):
        return _read_directory(subdirs[0], verify, task)  # an unpacked release: one folder inside
    raise FileNotFoundError(f"{d} holds no weights: expected model.safetensors or pytorch_model.bin (or their "
                            "*.index.json when sharded), a TF checkpoint (*.ckpt.index + .data-*), or a .pt / "
                            ".safetensors file.")


def _read_archive(path: Path, verify: bool, task: str | None = None) -> Checkpoint:
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        safe_extract(path, tmp)
        checkpoint = _read_directory(Path(tmp), verify, task)
        checkpoint.vocab_file = None  # the temporary copy is gone; the contents are in tokenizer_files
        return checkpoint


def _read_tf(prefix: Path, verify: bool) -> dict[str, torch.Tensor]:
    from bertkit.weights.tf_bundle import read_bundle

    arrays = tf_to_hf(read_bundle(prefix, verify=verify))
    # stored dtypes are kept: a half-precision checkpoint is cast (and reported) when it is fitted to a model
    return {name: torch.from_numpy(np.ascontiguousarray(a)) for name, a in arrays.items()}


def _read_torch(path: Path) -> dict[str, torch.Tensor]:
    if path.suffix == ".safetensors":
        return hf.load_safetensors(path)
    return _unwrap(hf.load_torch_file(path, nested=True), path)


def _unwrap(state: dict, path: Path | None = None) -> dict[str, torch.Tensor]:
    """Training checkpoints nest the weights (NVIDIA: ``{"model": ...}``; Lightning: ``"state_dict"``)."""
    for key in ("model", "state_dict", "module"):
        if isinstance(state.get(key), dict):
            state = state[key]
    state = {k.removeprefix("module."): v for k, v in state.items()}  # DistributedDataParallel's prefix
    bad = [k for k, v in state.items() if not isinstance(v, torch.Tensor)]
    if bad:
        raise ValueError(f"{path or 'the checkpoint'} is not a state dict: {bad[:5]} are not tensors.")
    return state


def _with_config(state: dict[str, torch.Tensor], directory: Path, fmt: str, task: str | None = None) -> Checkpoint:
    config_path = next((directory / n for n in CONFIG_NAMES if (directory / n).is_file()), None)
    if config_path is None:
        raise FileNotFoundError(f"{directory} has no config.json or bert_config.json next to the weights; "
                                "bertkit needs the architecture to build the model.")
    raw = read_json_object(config_path, "a model config")
    config = BERTConfig.from_json_file(config_path)
    if task_adapters.is_original(raw):  # Jina v3's original layout: its adapters merged (or dropped), HF's port
        state = task_adapters.read_original(raw, state, task, directory)
    else:
        task_adapters.refuse_task(task, directory)
    quantization, plan = int8.read_block(raw, directory), None
    if quantization is not None:  # float32 weights from here on; the model is made int8 again when loaded
        state, plan = int8.take_plan(state, quantization, directory)
        state = int8.dequantize_state(state, quantization, directory)
    state = hf_family_to_bertkit(state, config.family)  # RoBERTa's roberta.* / lm_head.* -> bertkit's names
    if plan is not None:  # its layers by their checkpoint (HF) names, as "modules" lists them
        layers = plan.meta["layers"]
        bertkit_names = hf_family_to_bertkit({name: name for name in layers}, config.family)
        plan = int8.renamed_plan(plan, {old: new for new, old in bertkit_names.items()})
    if "classifier.weight" in state and "id2label" not in raw and "num_labels" not in raw:
        config = config.replace(num_labels=state["classifier.weight"].shape[0])  # TF classifiers record it nowhere
    architectures = raw.get("architectures") or [None]
    tokenizer_files = {n: (directory / n).read_bytes() for n in TOKENIZER_FILES if (directory / n).is_file()}
    vocab = directory / "vocab.txt"
    return Checkpoint(config, state, fmt, architectures[0], tokenizer_files, vocab if vocab.is_file() else None,
                      quantization, plan)


def is_archive(path: Path) -> bool:
    """Whether ``path`` is a checkpoint archive file (:data:`ARCHIVE_SUFFIXES`)."""
    return path.is_file() and path.name.endswith(ARCHIVE_SUFFIXES)


def read_source_config(source: str | os.PathLike) -> BERTConfig:
    """The config of ``source`` (anything bertkit loads; a registered name is downloaded) without reading its
    weights where the config sits beside them (a folder, a TF prefix's or a weights file's folder); an archive is
    read whole."""
    from bertkit.weights.download import resolve_source

    path = Path(resolve_source(source))
    if not is_archive(path):
        folder = path if path.is_dir() else path.parent
        for name in CONFIG_NAMES:
            if (folder / name).is_file():
                return BERTConfig.from_json_file(folder / name)
    return read_checkpoint(path).config
