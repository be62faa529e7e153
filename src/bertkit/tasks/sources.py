"""Loading any checkpoint bertkit reads together with its own tokenizer: what pretraining and fine-tuning start from.

A *source* is an HF / bertkit directory, a Google TF1 checkpoint (its directory, its
``bert_model.ckpt`` prefix, or a ``.zip`` of the directory), a pytorch_pretrained_bert
``.tar.gz``, or a registered name such as ``"bert-base-uncased"`` (fetched into the cache by
:func:`bertkit.weights.download.resolve_source`). :func:`load_model_and_tokenizer` reads it
once (:func:`bertkit.weights.formats.read_checkpoint`) and returns the model and the tokenizer
it was trained with; :func:`load_source` also says where it came from and fingerprints its
content, so a run can tell on resume whether it is handed the same checkpoint.

:func:`inspect_source` says what a source holds without loading it (family, architecture, the task of
:mod:`bertkit.tasks.table` it answers, labels, trained length, sentence-transformers or cross-encoder layout,
saved dtype, and which learned-sparse kind it is): the one reading of ``config.json``, ``modules.json`` and
``task.json`` that ``pipeline()``, ``serve``, ``export``, ``evaluate`` and the sentence-transformers loaders share.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import torch

from bertkit.config import BERTConfig, bert_architecture_name
from bertkit.io import read_json, read_json_object
from bertkit.modeling.base import BERTPreTrainedModel
from bertkit.tasks.table import TaskRow, find_task, task_for_architecture
from bertkit.tokenization import BERTTokenizerFast
from bertkit.tokenization.auto import load_tokenizer
from bertkit.tokenization.base import FastTokenizerBase

logger = logging.getLogger("bertkit.sources")

M = TypeVar("M", bound=BERTPreTrainedModel)

#: the record ``bertkit finetune`` writes beside its model (:func:`read_task_file`)
TASK_FILE = "task.json"
MODULES_FILE = "modules.json"
ROUTER_FILE = "router_config.json"
#: the file FlagEmbedding writes BGE-M3's token-weight layer to, beside the XLM-R weights
SPARSE_LINEAR = "sparse_linear.pt"
#: the file FlagEmbedding writes BGE-M3's multi-vector (ColBERT) projection to
COLBERT_LINEAR = "colbert_linear.pt"
#: what :attr:`SourceInfo.sparse` names: sentence-transformers' sparse encoders (SPLADE, an inference-free
#: Router with a static query side, CSR over a dense model), and BGE-M3's lexical weights
SPARSE_KINDS = ("splade", "inference-free", "csr", "bge-m3")
#: the sparse kinds a :class:`bertkit.SparseEncoder` loads (the ``sparse-embeddings`` row holds them)
SPARSE_ENCODERS = ("splade", "inference-free", "csr")
#: what :attr:`SourceInfo.multi_vector` names: a ColBERT directory of sentence-transformers 6 (a ``MultiVectorMask``
#: module), PyLate (``model_type`` ColBERT) or Stanford ColBERT (``HF_ColBERT``), all loaded by
#: :class:`bertkit.MultiVectorEncoder` (the ``multi-vector`` row); or BGE-M3's ``colbert_linear.pt``
MULTI_VECTOR_KINDS = ("sentence-transformers", "pylate", "stanford", "bge-m3")
#: the multi-vector kinds :class:`bertkit.MultiVectorEncoder` loads
COLBERT_LAYOUTS = ("sentence-transformers", "pylate", "stanford")
#: what :attr:`SourceInfo.static` names: a Model2Vec directory (``model.safetensors`` holding ``embeddings``) or a
#: sentence-transformers ``StaticEmbedding`` module (``embedding.weight``); both load as
#: :class:`bertkit.sentence.static.StaticEmbedding` (task ``embeddings``)
STATIC_KINDS = ("model2vec", "sentence-transformers")
#: each static kind's table in its ``model.safetensors``
_STATIC_TABLES = {"model2vec": "embeddings", "sentence-transformers": "embedding.weight"}
_TRANSFORMERS = ("Transformer", "MLMTransformer")
#: safetensors' and HF config's names of the float formats -> bertkit's
_DTYPES = {"F32": "fp32", "BF16": "bf16", "F16": "fp16", "float32": "fp32", "bfloat16": "bf16", "float16": "fp16"}


@dataclass
class LoadedSource:
    """A checkpoint loaded into ``model``, its ``tokenizer``, and what identifies it.

    ``source`` is what the caller named (a path made absolute, or a registered name), ``path``
    the local file or directory it resolved to, and ``fingerprint`` a JSON-able record of the
    content (format, tensor count, sha256 of every tensor and of the config): the same
    weights give the same fingerprint whatever their path or file format.
    """

    model: BERTPreTrainedModel
    tokenizer: FastTokenizerBase
    source: str
    path: Path
    fingerprint: dict[str, Any]


def load_model_and_tokenizer(source: str | os.PathLike, model_class: type[M], *, warn: bool = True,
                             **config_overrides: Any) -> tuple[M, FastTokenizerBase]:
    """``model_class`` with ``source``'s weights (in eval mode) and the tokenizer ``source`` was trained with.

    ``source``: anything bertkit loads (see the module doc; a registered name is downloaded once).
    The model is built from the checkpoint's config with ``config_overrides`` applied (e.g.
    ``num_labels=3``; ``strict=False`` and ``dtype`` are passed to the loader instead) and loaded as
    ``from_pretrained`` loads: strictly, with a fresh head where the checkpoint has none (an
    MLM-only checkpoint in :class:`~bertkit.BERTForPreTraining` gets a new NSP head) and each
    such adaptation in ``model.load_report`` and, unless ``warn=False``, a
    :class:`~bertkit.LoadWarning`.

    The tokenizer is the checkpoint's own, of the class :func:`bertkit.tokenization.load_tokenizer` picks
    (BERT's for BERT, DistilBERT and ELECTRA; the ``tokenizer.json`` as HF reads it for RoBERTa, XLM-R, MPNet,
    ModernBERT...): its ``tokenizer_config.json`` + ``vocab.txt`` or its ``tokenizer.json``; a bare ``vocab.txt``
    (Google's releases) is lower-cased unless its word pieces are capitalised (or, for a vocabulary without
    cased letters, the checkpoint's name says ``cased``), as ``bertkit convert`` decides
    (:func:`bertkit.weights.convert.guess_do_lower_case`).

    Raises ``ValueError`` when the source has no vocabulary (naming it and what to add), when the
    vocabulary is larger than the model's embeddings, or when the weights do not fit
    ``model_class``; ``FileNotFoundError`` when ``source`` holds no checkpoint.
    """
    loaded = load_source(source, model_class, warn=warn, **config_overrides)
    return loaded.model, loaded.tokenizer


def load_source(source: str | os.PathLike, model_class: type[M], *, warn: bool = True,
                **config_overrides: Any) -> LoadedSource:
    """:func:`load_model_and_tokenizer`, plus where the checkpoint came from and its content fingerprint."""
    from bertkit.weights.adapt import load_into
    from bertkit.weights.download import resolve_source
    from bertkit.weights.formats import read_checkpoint
    from bertkit.weights.hf import apply_load_dtype

    overrides = dict(config_overrides)
    strict = overrides.pop("strict", True)
    dtype = overrides.pop("dtype", None)
    resolved = Path(resolve_source(source))
    checkpoint = read_checkpoint(resolved, task=overrides.pop("task", None))  # Jina v3's task adapter, merged
    tokenizer = _checkpoint_tokenizer(checkpoint, resolved, source)
    config = checkpoint.config.replace(**overrides) if overrides else checkpoint.config
    if tokenizer.vocab_size > config.vocab_size:
        raise ValueError(f"{source}: its vocabulary has {tokenizer.vocab_size} tokens but the model only "
                         f"{config.vocab_size} embeddings; the vocab.txt / tokenizer.json beside the weights belongs "
                         "to another checkpoint. Put the checkpoint's own vocabulary there.")
    model = model_class(config)
    load_into(model, checkpoint.state_dict, strict=strict, warn=warn, source=resolved)
    apply_load_dtype(model.eval(), checkpoint.quantization, dtype, resolved, warn,  # an int8 checkpoint runs int8
                     plan=checkpoint.int8_plan)
    named = os.path.abspath(source) if isinstance(source, str | os.PathLike) and os.path.exists(source) \
        else str(source)  # a registered name
    return LoadedSource(model.eval(), tokenizer, named, resolved, _fingerprint(checkpoint))


def source_config(source: str | os.PathLike) -> BERTConfig:
    """The config of ``source`` without reading its weights where it sits beside them (an archive is read whole):
    :func:`bertkit.weights.formats.read_source_config`."""
    from bertkit.weights.formats import read_source_config

    return read_source_config(source)


# ---------------------------------------------------------------------------------------- what a source holds
@dataclass(frozen=True)
class SourceInfo:
    """What a source holds (:func:`inspect_source`).

    ``path``: the file or directory ``source`` resolved to; ``model_path``: the folder of the model's own files
    (a sentence-transformers directory's Transformer module). ``layout``: ``"sentence-transformers"`` (a
    ``modules.json``), ``"finetune"`` (a ``task.json`` beside an HF model), ``"hf"`` (a ``config.json`` beside
    the weights) or ``"checkpoint"`` (anything else: Google's TF checkpoints, archives, weight files).
    ``architecture``: the HF class name the config records, else the one the weights' heads show; ``model``:
    the ``"module:Class"`` bertkit runs it as (None for an architecture bertkit does not know). ``task``: the
    row of :data:`bertkit.tasks.table.TABLE` it answers (None: none). ``labels``: a classifier's labels in id
    order. ``max_length``: the length it was trained or saved at (``task.json``, ``sentence_bert_config.json``),
    ``positions`` the longest input it takes. ``dtype``: the saved number format (``fp32``, ``bf16``, ``fp16``,
    ``int8``; None where the files do not say without reading the weights). ``sparse``: the learned-sparse kind
    (:data:`SPARSE_KINDS`: ``splade``, ``inference-free``, ``csr`` — a sentence-transformers sparse encoder, task
    ``sparse-embeddings`` — or ``bge-m3``, a dense model with FlagEmbedding's ``sparse_linear.pt``); None for
    others. ``multi_vector``: the late-interaction kind (:data:`MULTI_VECTOR_KINDS`: a ColBERT directory, task
``multi-vector``, or ``bge-m3``, a BGE-M3 directory with ``colbert_linear.pt``); None for others. ``modules``: a
Router's modules are named ``route/Type`` (``query/SparseStaticEmbedding``). ``static``: a static embedding model
(:data:`STATIC_KINDS`: a token table, no transformer; layout ``static``, task ``embeddings``), whose ``config`` is
None and whose ``table`` is ``(vocabulary, dimensions)``; None for others.
    """

    source: str
    path: Path
    model_path: Path
    layout: str
    config: BERTConfig | None
    architecture: str | None
    model: str | None
    task: str | None
    labels: tuple[str, ...] | None
    max_length: int | None
    dtype: str | None
    cross_encoder: bool = False
    modules: tuple[str, ...] = ()
    record: dict[str, Any] | None = None
    config_path: Path | None = None
    sparse: str | None = None
    multi_vector: str | None = None
    static: str | None = None
    table: tuple[int, int] | None = None

    @property
    def family(self) -> str:
        return "static" if self.config is None else self.config.family

    @property
    def positions(self) -> int | None:
        """The longest input the model takes (None: a static model has no positions)."""
        return None if self.config is None else self.config.max_tokens

    @property
    def num_labels(self) -> int:
        return 0 if self.config is None else self.config.num_labels

    @property
    def sentence_transformers(self) -> bool:
        return self.layout == "sentence-transformers"

    @property
    def row(self) -> TaskRow | None:
        return None if self.task is None else find_task(self.task)

    def describe(self) -> str:
        """One line, what ``bertkit info`` prints: ``layout hf (cross-encoder), architecture
        BertForSequenceClassification, task rerank, labels ['LABEL_0'], max length 128 (takes 512), saved fp32``;
        a static model's: ``layout static (model2vec), architecture StaticEmbedding, task embeddings, ..., table
        30522 x 256, max length 512 (takes any), saved fp32``."""
        parts = [f"layout {self.layout}" + (" (cross-encoder)" if self.cross_encoder else "")
                 + (f" (sparse: {self.sparse})" if self.sparse else "")
                 + (f" (multi-vector: {self.multi_vector})" if self.multi_vector else "")
                 + (f" ({self.static})" if self.static else ""),
                 f"architecture {self.architecture or 'unknown'}", f"task {self.task or 'none'}"]
        if self.modules:
            parts.append(f"modules {' > '.join(self.modules)}")
        if self.labels is not None:
            parts.append(f"labels {list(self.labels)}")
        if self.table is not None:
            parts.append(f"table {self.table[0]} x {self.table[1]}")
        parts.append(f"max length {self.max_length or 'not recorded'} (takes {self.positions or 'any'})")
        parts.append(f"saved {self.dtype or 'in a format read only with the weights'}")
        return ", ".join(parts)


def inspect_source(source: str | os.PathLike) -> SourceInfo:
    """What ``source`` (anything bertkit loads; a registered name is fetched into the cache) holds, read from its
    ``config.json``, ``modules.json``, ``task.json`` and safetensors headers; the weights are read only where no
    config records the architecture (Google's TF checkpoints) or the config sits inside an archive.

    The task: a cross-encoder (a sequence classifier alone, or the one module of a sentence-transformers
    directory) is ``rerank`` with one label, else ``text-classification``; another sentence-transformers
    directory ``embeddings`` (a sparse encoder's: ``sparse-embeddings``); a ``task.json`` names its task; otherwise
    the architecture's row
    (:func:`bertkit.tasks.table.task_for_architecture`); a static model (:func:`static_kind`) ``embeddings``, read
    from its safetensors header alone. ``FileNotFoundError`` when ``source`` holds no
    checkpoint; ``ValueError`` naming the file for a damaged ``modules.json``, config or ``task.json``.
    """
    from bertkit.weights.download import resolve_source

    path = Path(resolve_source(source))
    modules = _modules(path)
    static = static_kind(path, modules)
    if static is not None:
        return _static_info(source, path, modules, static)
    model_path = path / modules[0][1] if modules else (path if path.is_dir() else path.parent)
    config, raw, config_path, checkpoint = _read_config(path, model_path)
    architecture = (raw.get("architectures") or [None])[0]
    cls = _architecture_class(architecture)
    if architecture is None:  # no architecture recorded: the heads present decide, as bertkit convert decides
        from bertkit.weights.convert import class_for_checkpoint
        from bertkit.weights.formats import read_checkpoint

        cls = class_for_checkpoint(checkpoint or read_checkpoint(model_path if modules else path))
        architecture = cls.hf_architecture
    record = read_task_file(path / TASK_FILE) if path.is_dir() and (path / TASK_FILE).is_file() else None
    cross = path.is_dir() and len(modules) <= 1 and config_path is not None and config_path.name == "config.json" \
        and architecture.endswith("ForSequenceClassification")  # what CrossEncoder and sentence-transformers load
    sparse = _sparse_kind(path, modules)
    row, model = _task_row(path, architecture, config.num_labels, modules, record, cross)
    if sparse in SPARSE_ENCODERS:
        row, model = find_task("sparse-embeddings"), "bertkit.sentence.sparse:SparseEncoder"
    multi_vector = _multi_vector_kind(path, modules, raw)
    if multi_vector in COLBERT_LAYOUTS:
        row = find_task("multi-vector")
        model = row.model
    model = model or (f"{cls.__module__}:{cls.__qualname__}" if cls is not None else None)
    hf = config_path is not None and config_path.name == "config.json"
    layout = "sentence-transformers" if modules else "finetune" if record else "hf" if hf else "checkpoint"
    labels = None
    if row is not None and row.serve is not None and row.serve.labels:
        id2label = config.id2label or {i: f"LABEL_{i}" for i in range(config.num_labels)}
        labels = tuple(id2label[i] for i in sorted(id2label))
    return SourceInfo(os.fspath(source), path, model_path, layout, config, architecture, model,
                      None if row is None else row.name, labels, _trained_length(path, model_path, record, modules),
                      _saved_dtype(model_path, raw), cross, tuple(kind for kind, _ in modules), record, config_path,
                      sparse, multi_vector)


def read_task_file(path: str | os.PathLike) -> dict[str, Any]:
    """The record ``bertkit finetune`` writes as ``task.json``: ``{"task": str, "options": dict, "max_seq_length":
    int or None}`` (options default to ``{}``, the length to None). A file that is not that JSON object is a
    ``ValueError`` naming it (and the line, column or key that is wrong)."""
    what = "the task record bertkit finetune writes ({\"task\": \"classify\", \"options\": {...}})"
    record = read_json_object(path, what)
    problems = {"task": isinstance(record.get("task"), str), "options": isinstance(record.get("options", {}), dict),
                "max_seq_length": isinstance(record.get("max_seq_length", 1), int | None)}
    wrong = [key for key, fine in problems.items() if not fine]
    if wrong:
        raise ValueError(f"{os.fspath(path)}: {', '.join(repr(k) for k in wrong)} missing or of the wrong type; it "
                         f"should hold {what}: fix the file or fine-tune again.")
    return {"options": {}, "max_seq_length": None, **record}


def _modules(path: Path) -> list[tuple[str, str]]:
    """A sentence-transformers directory's modules as ``(type, folder)`` in order, the Transformer first (a
    Router's: every route's modules, ``route/Type``, the first Transformer of them first); ``[]`` without a
    ``modules.json``."""
    if not (path.is_dir() and (path / MODULES_FILE).is_file()):
        return []
    entries = read_json(path / MODULES_FILE, "the sentence-transformers modules")
    if not isinstance(entries, list) or not entries or not all(isinstance(e, dict) for e in entries):
        raise ValueError(f"{path / MODULES_FILE} should hold a list of modules ([{{\"idx\": 0, \"path\": \"\", "
                         "\"type\": \"sentence_transformers.models.Transformer\"}, ...]): fix or restore it.")
    modules = [(str(e.get("type", "")).rsplit(".", 1)[-1], str(e.get("path", "")))
               for e in sorted(entries, key=lambda e: e.get("idx", 0))]
    if len(modules) == 1 and modules[0][0] == "Router":
        modules = _router_modules(path, modules[0][1])
    transformer = next((m for m in modules if m[0].rpartition("/")[2] in _TRANSFORMERS), modules[0])
    return [transformer, *(m for m in modules if m is not transformer)]


def _router_modules(path: Path, folder: str) -> list[tuple[str, str]]:
    """A Router's modules, every route's in order, as ``("route/Type", folder under the directory)``, read from its
    ``router_config.json`` (``{"types": {folder: type}, "structure": {route: [folder, ...]}}``)."""
    where = path / folder
    config = read_json_object(where / ROUTER_FILE, "a sentence-transformers Router's routes")
    types, structure = config.get("types"), config.get("structure")
    if not isinstance(types, dict) or not isinstance(structure, dict) or not structure or \
            not all(isinstance(names, list) and all(n in types for n in names) for names in structure.values()):
        raise ValueError(f"{where / ROUTER_FILE} should map each route to module folders listed in its types "
                         "({\"types\": {folder: type}, \"structure\": {\"query\": [folder], ...}}): fix or "
                         "restore it.")
    return [(f"{route}/{str(types[name]).rsplit('.', 1)[-1]}", os.path.join(folder, name))
            for route, names in structure.items() for name in names]


def static_kind(path: str | os.PathLike, modules: list[tuple[str, str]] | None = None) -> str | None:
    """The static kind of :data:`STATIC_KINDS` a directory holds, or None: a ``StaticEmbedding`` module first in
    its ``modules.json`` (model2vec writes one too, at ``"."``), or, without one, Model2Vec's files
    (``model.safetensors`` with ``embeddings`` beside ``tokenizer.json``). Which table the module's
    ``model.safetensors`` holds tells the two apart; ``modules`` is :func:`_modules`' reading, when made."""
    path = Path(path)
    if not path.is_dir():
        return None
    modules = _modules(path) if modules is None else modules
    if modules and modules[0][0] != "StaticEmbedding":
        return None
    folder = path / modules[0][1] if modules else path
    if not modules and not (folder / "tokenizer.json").is_file():
        return None
    names = _safetensors_header(folder / "model.safetensors") if (folder / "model.safetensors").is_file() else {}
    kind = next((kind for kind, table in _STATIC_TABLES.items() if table in names), None)
    if modules and kind is None:
        raise ValueError(f"{folder / 'model.safetensors'}: a StaticEmbedding module's weights should hold "
                         f"{' or '.join(repr(t) for t in _STATIC_TABLES.values())} (the token table); it holds "
                         f"{sorted(names) or 'no file'}. Restore the file the model was saved with.")
    return kind


def _static_info(source: str | os.PathLike, path: Path, modules: list[tuple[str, str]], kind: str) -> SourceInfo:
    """:func:`inspect_source`'s answer for a static directory: its table's size and format from the safetensors
    header, its length limit from Model2Vec's ``config.json`` (``max_length``; sentence-transformers' module has
    none)."""
    folder = path / modules[0][1] if modules else path
    entry = _safetensors_header(folder / "model.safetensors")[_STATIC_TABLES[kind]]
    config_path = folder / "config.json"
    config = read_json_object(config_path, "a Model2Vec config") if kind == "model2vec" and config_path.is_file() \
        else {}
    max_length = config.get("max_length") if isinstance(config.get("max_length"), int) else None
    row = find_task("embeddings")
    return SourceInfo(os.fspath(source), path, folder, "static", None, "StaticEmbedding",
                      "bertkit.sentence.static:StaticEmbedding", row.name, None, max_length,
                      _DTYPES.get(entry.get("dtype"), entry.get("dtype")), modules=tuple(k for k, _ in modules),
                      config_path=config_path if config else None, static=kind,
                      table=tuple(int(n) for n in entry["shape"]))


def _safetensors_header(path: Path) -> dict[str, Any]:
    """A safetensors file's header: tensor name -> ``{"dtype", "shape", "data_offsets"}`` (and ``__metadata__``);
    a file too short or not JSON there is a ValueError naming it."""
    try:
        with open(path, "rb") as f:
            size = int.from_bytes(f.read(8), "little")
            header = json.loads(f.read(size)) if 2 <= size <= 100_000_000 else None
    except (UnicodeDecodeError, json.JSONDecodeError):
        header = None
    if not isinstance(header, dict):
        raise ValueError(f"{path} is not a safetensors file (its header is damaged or missing): restore it.")
    return header


def _sparse_kind(path: Path, modules: list[tuple[str, str]]) -> str | None:
    """The learned-sparse kind of :data:`SPARSE_KINDS` the directory holds (see :class:`SourceInfo`), or None."""
    kinds = {kind.rpartition("/")[2] for kind, _ in modules}
    if "SparseStaticEmbedding" in kinds:
        return "inference-free"
    if "SparseAutoEncoder" in kinds:
        return "csr"
    if "SpladePooling" in kinds:
        return "splade"
    return "bge-m3" if path.is_dir() and (path / SPARSE_LINEAR).is_file() else None


def _multi_vector_kind(path: Path, modules: list[tuple[str, str]], raw: dict[str, Any]) -> str | None:
    """The late-interaction kind of :data:`MULTI_VECTOR_KINDS` the directory holds (see :class:`SourceInfo`), read
    from the files alone (:func:`bertkit.sentence.colbert_layouts.read_colbert_layout` reads the settings)."""
    if not path.is_dir():
        return None
    if "MultiVectorMask" in {kind.rpartition("/")[2] for kind, _ in modules}:
        return "sentence-transformers"
    settings = path / "config_sentence_transformers.json"
    model_type = read_json_object(settings, "sentence-transformers settings").get("model_type") \
        if modules and settings.is_file() else None
    if model_type in ("ColBERT", "MultiVectorEncoder"):
        return "pylate" if model_type == "ColBERT" else "sentence-transformers"
    if not modules and "HF_ColBERT" in (raw.get("architectures") or []):
        return "stanford"
    # BAAI/bge-m3 is a sentence-transformers directory (CLS pooling) with FlagEmbedding's heads beside it
    return "bge-m3" if (path / COLBERT_LINEAR).is_file() else None


def _read_config(path: Path, model_path: Path):
    """``(config, raw config.json or {}, its path or None, checkpoint or None)``: the config beside the weights,
    else (an archive, a directory without one) the one :func:`read_checkpoint` finds, read with the weights."""
    from bertkit.weights.formats import CONFIG_NAMES, is_archive, read_checkpoint

    if not is_archive(path):
        for name in CONFIG_NAMES:
            if (model_path / name).is_file():
                return BERTConfig.from_json_file(model_path / name), read_json_object(model_path / name,
                                                                                      "a model config"), \
                    model_path / name, None
    from bertkit.weights.int8 import KEY

    checkpoint = read_checkpoint(path)
    raw = {"architectures": [checkpoint.architecture], KEY: checkpoint.quantization}
    return checkpoint.config, raw, None, checkpoint


def _architecture_class(architecture: str | None) -> type[BERTPreTrainedModel] | None:
    from bertkit.weights.convert import ARCHITECTURES

    return None if architecture is None else ARCHITECTURES.get(bert_architecture_name(architecture))


def _task_row(path: Path, architecture: str, num_labels: int, modules: list, record: dict | None,
              cross: bool) -> tuple[TaskRow | None, str | None]:
    """``(row, model class name)``: the rules of :func:`inspect_source`'s doc, in that order; the class only where
    the layout decides it (a bi-encoder, a task.json)."""
    by_architecture = task_for_architecture(bert_architecture_name(architecture), num_labels)
    if cross:
        return by_architecture, None
    if modules:
        row = find_task("embeddings")
        return row, row.model
    if record is not None:
        try:
            row = find_task(record["task"], "trainer")
        except ValueError as error:
            raise ValueError(f"{path / TASK_FILE}: {error}") from None
        return row, row.model
    return by_architecture, None


def _trained_length(path: Path, model_path: Path, record: dict | None, modules: list) -> int | None:
    if record is not None:
        return record["max_seq_length"]
    for folder in (model_path, path) if modules else ():
        if (folder / "sentence_bert_config.json").is_file():
            return read_json_object(folder / "sentence_bert_config.json", "sentence-transformers settings") \
                .get("max_seq_length")
    return None


def _saved_dtype(folder: Path, raw: dict[str, Any]) -> str | None:
    """int8 for bertkit's int8 checkpoint; else the float format most tensors of the safetensors file (the first
    shard) hold, read from its header; else what ``config.json``'s ``torch_dtype`` says; else None."""
    from bertkit.weights.hf import SAFETENSORS_INDEX_NAME, SAFETENSORS_NAME
    from bertkit.weights.int8 import KEY

    if raw.get(KEY) is not None:
        return "int8"
    weights = folder / SAFETENSORS_NAME
    if not weights.is_file() and (folder / SAFETENSORS_INDEX_NAME).is_file():
        shards = read_json_object(folder / SAFETENSORS_INDEX_NAME, "a safetensors index").get("weight_map") or {}
        weights = folder / sorted(set(shards.values()))[0] if shards else weights
    if weights.is_file():
        header = _safetensors_header(weights)
        counts: dict[str, int] = {}
        for entry in header.values():
            name = _DTYPES.get(entry.get("dtype")) if isinstance(entry, dict) else None
            if name is not None:
                counts[name] = counts.get(name, 0) + 1
        if counts:
            return max(counts, key=counts.get)
    return _DTYPES.get(raw.get("torch_dtype") or raw.get("dtype"))


def _checkpoint_tokenizer(checkpoint, resolved: Path, source: str | os.PathLike) -> FastTokenizerBase:
    """The checkpoint's tokenizer, from the tokenizer files :func:`read_checkpoint` found beside its weights."""
    from bertkit.weights.convert import guess_do_lower_case

    files = checkpoint.tokenizer_files
    # named as Google names its releases: the archive, or the folder (of a TF prefix or weights file)
    named = resolved if resolved.is_dir() or _is_archive(resolved) else resolved.parent
    if "vocab.txt" not in files and "tokenizer.json" not in files:
        where = "inside the archive" if _is_archive(resolved) else f"in {named}"
        raise ValueError(f"{source} has no vocabulary: neither vocab.txt nor tokenizer.json {where}, so its "
                         "tokenizer is unknown. Put the vocab.txt the checkpoint was trained with (and its "
                         "tokenizer_config.json, for do_lower_case) beside its config, then load it again.")
    with tempfile.TemporaryDirectory() as staging:
        for name, data in files.items():
            (Path(staging) / name).write_bytes(data)
        if "tokenizer_config.json" in files or "tokenizer.json" in files:
            # the model type decides the tokenizer class where tokenizer_config.json names none, as in HF
            (Path(staging) / "config.json").write_text(json.dumps({"model_type": checkpoint.config.hf_model_type}))
            return load_tokenizer(staging)
        lower = guess_do_lower_case(str(named), files["vocab.txt"])
        logger.info("%s: vocab.txt without tokenizer_config.json; do_lower_case=%s from its vocabulary (or name)",
                    source, lower)
        return BERTTokenizerFast.from_pretrained(staging, do_lower_case=lower)


def _is_archive(path: Path) -> bool:
    from bertkit.weights.formats import is_archive

    return is_archive(path)


def _fingerprint(checkpoint) -> dict[str, Any]:
    """The checkpoint's content: every tensor (name, dtype, shape, bytes) and the config, hashed."""
    digest = hashlib.sha256()
    for name in sorted(checkpoint.state_dict):
        tensor = checkpoint.state_dict[name].detach().cpu().contiguous()
        digest.update(f"{name}|{tensor.dtype}|{tuple(tensor.shape)}\n".encode())
        digest.update(tensor.reshape(-1).view(torch.uint8).numpy())
    config = json.dumps(checkpoint.config.to_dict(), sort_keys=True)
    return {"format": checkpoint.format, "tensors": len(checkpoint.state_dict), "weights_sha256": digest.hexdigest(),
            "config_sha256": hashlib.sha256(config.encode()).hexdigest()}


__all__ = ["COLBERT_LAYOUTS", "COLBERT_LINEAR", "MULTI_VECTOR_KINDS", "SPARSE_ENCODERS", "SPARSE_KINDS",
           "SPARSE_LINEAR", "STATIC_KINDS", "TASK_FILE", "LoadedSource",
           "SourceInfo", "inspect_source", "load_model_and_tokenizer", "load_source", "read_task_file", "source_config",
           "static_kind"]


def require_scoring_head(model: str | os.PathLike, flag: str) -> None:
    """Refuse (``ValueError`` naming ``flag``) a ``model`` that holds no trained scoring head: a cross-encoder
    directory or any checkpoint of a sequence classifier (:func:`bertkit.tasks.sources.inspect_source`) passes; an
    embedding model or a base checkpoint would score with a classifier initialised at random, whose scores mean
    nothing."""
    info = inspect_source(model)
    if info.cross_encoder or info.task in ("rerank", "text-classification"):  # a sequence classifier
        return
    held = (info.model or info.architecture or "model").rpartition(":")[2]
    what = "an embedding model (a bi-encoder)" if info.sentence_transformers else f"a {held}"
    raise ValueError(f"{flag}: {os.fspath(model)} holds {what} and no trained scoring head: its scores would come "
                     "from a classifier initialised at random. Give a cross-encoder (a reranker: what `bertkit "
                     "finetune rerank` writes, or a sentence-transformers CrossEncoder directory) or a sequence "
                     "classifier (what `bertkit finetune classify` writes).")
