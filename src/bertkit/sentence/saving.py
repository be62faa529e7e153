"""Writing a sentence-transformers directory: what :class:`~bertkit.sentence.SentenceTransformer` runs, saved so
that sentence-transformers (5 and 6) and bertkit load it back with the same vectors.

Layout (sentence-transformers' own): the BERT at the root (``config.json``, ``model.safetensors``, tokenizer
files), ``modules.json`` listing ``Transformer`` (path ``""``), ``1_Pooling``, then each ``Dense`` and a
``Normalize``; ``sentence_bert_config.json`` (``max_seq_length``, ``do_lower_case``);
``config_sentence_transformers.json`` (prompts, default prompt, similarity function, versions); an optional
model card ``README.md``. Module types are written under their long-standing names
(``sentence_transformers.models.Pooling``), which every version reads. Every file is written atomically.

A :class:`~bertkit.sentence.SparseEncoder` is written as sentence-transformers 6 writes one
(:func:`save_sparse_encoder`): ``MLMTransformer`` at the root and ``1_SpladePooling``, or one ``Router`` whose
``router_config.json`` lists each route's modules in folders ``{route}_{index}_{kind}`` (a
``SparseStaticEmbedding``: tokenizer files and its ``weight`` vector), or CSR: the dense directory above and a
``SparseAutoEncoder`` after it.

A :class:`~bertkit.sentence.MultiVectorEncoder` is written as sentence-transformers 6 writes one
(:func:`save_multi_vector_encoder`): the ``Transformer`` at the root (its ``sentence_bert_config.json`` with the
query/document lengths and the query expansion), each projection ``Dense`` on ``token_embeddings``, the
``MultiVectorMask`` (skiplist) and a token ``Normalize``, under sentence-transformers 6's module names.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from bertkit.io import atomic_write, atomic_write_text
from bertkit.sentence.modules import POOLING_MODES, Dense

if TYPE_CHECKING:
    from bertkit.sentence.model import SentenceTransformer
    from bertkit.sentence.multi_vector import MultiVectorEncoder
    from bertkit.sentence.sparse import SparseEncoder

MODULE_TYPES = {"Transformer": "sentence_transformers.models.Transformer",
                "Pooling": "sentence_transformers.models.Pooling",
                "Dense": "sentence_transformers.models.Dense",
                "Normalize": "sentence_transformers.models.Normalize"}
SIMILARITY_FUNCTIONS = ("cosine", "dot", "euclidean", "manhattan")
SPARSE_TYPES = {"MLMTransformer": "sentence_transformers.sparse_encoder.modules.mlm_transformer.MLMTransformer",
                "SpladePooling": "sentence_transformers.sparse_encoder.modules.splade_pooling.SpladePooling",
                "SparseStaticEmbedding":
                    "sentence_transformers.sparse_encoder.modules.sparse_static_embedding.SparseStaticEmbedding",
                "Router": "sentence_transformers.base.modules.router.Router",
                "SparseAutoEncoder":
                    "sentence_transformers.sparse_encoder.modules.sparse_auto_encoder.SparseAutoEncoder"}
MULTI_VECTOR_TYPES = {
    "MultiVectorTransformer": "sentence_transformers.base.modules.transformer.Transformer",
    "TokenDense": "sentence_transformers.base.modules.dense.Dense",
    "MultiVectorMask": "sentence_transformers.multi_vector_encoder.modules.multi_vector_mask.MultiVectorMask",
    "TokenNormalize": "sentence_transformers.base.modules.normalize.Normalize",
    "HierarchicalTokenPooling":
        "sentence_transformers.multi_vector_encoder.modules.token_pooling.HierarchicalTokenPooling"}
ALL_TYPES = {**MODULE_TYPES, **SPARSE_TYPES, **MULTI_VECTOR_TYPES}
TOKENS = {"module_input_name": "token_embeddings", "module_output_name": "token_embeddings"}  # per-token modules


def save_sentence_transformer(model: SentenceTransformer, directory: str | os.PathLike, *,
                              model_card: str | None = None, dtype: str | None = None) -> Path:
    """Write ``model`` as a sentence-transformers directory at ``directory`` (created if missing); returns it.

    ``model_card``: the text of a ``README.md`` to write beside (None: leave any README there alone).
    ``dtype``: the BERT's checkpoint format, as ``save_pretrained`` takes it (``"int8"``: bertkit's int8
    checkpoint, which sentence-transformers does not read; None: as the model was loaded)."""
    root = Path(directory)
    root.mkdir(parents=True, exist_ok=True)
    if model.similarity_fn_name not in SIMILARITY_FUNCTIONS:
        raise ValueError(f"similarity_fn_name must be one of {SIMILARITY_FUNCTIONS}, got {model.similarity_fn_name!r}")
    modules = _save_pipeline(model, root, _root_folder, dtype)
    _write_json(root / "modules.json", [_module(index, path, kind) for index, (path, kind) in enumerate(modules)])
    _write_json(root / "config_sentence_transformers.json", _settings(model))
    if model_card is not None:
        atomic_write_text(root / "README.md", model_card)
    return root


def save_sparse_encoder(model: SparseEncoder, directory: str | os.PathLike, *,
                        model_card: str | None = None) -> Path:
    """Write ``model`` as a sentence-transformers sparse encoder directory at ``directory`` (created if missing)
    that sentence-transformers 6 and bertkit load with the same vectors; returns it. ``model_card`` as for
    :func:`save_sentence_transformer`."""
    root = Path(directory)
    root.mkdir(parents=True, exist_ok=True)
    if model.similarity_fn_name not in SIMILARITY_FUNCTIONS:
        raise ValueError(f"similarity_fn_name must be one of {SIMILARITY_FUNCTIONS}, got {model.similarity_fn_name!r}")
    if not model.layout.routes:
        modules = _save_sparse_route(model.routes["main"], root, _root_folder)
        _write_json(root / "modules.json", [_module(index, path, kind) for index, (path, kind) in enumerate(modules)])
    else:
        types, structure = {}, {}
        for name, route in model.routes.items():
            folders = _save_sparse_route(route, root, lambda index, kind, name=name: f"{name}_{index}_{kind}")
            types.update({path: ALL_TYPES[kind] for path, kind in folders})
            structure[name] = [path for path, _ in folders]
        _write_json(root / "router_config.json", {
            "types": types, "structure": structure,
            "parameters": {"default_route": model.default_route, "allow_empty_key": True, "route_mappings": {}}})
        _write_json(root / "modules.json", [_module(0, "", "Router")])
    settings = {"__version__": {"bertkit": _bertkit_version(), "pytorch": torch.__version__},
                "model_type": "SparseEncoder", "prompts": dict(model.prompts),
                "default_prompt_name": model.default_prompt_name, "similarity_fn_name": model.similarity_fn_name}
    if model.max_active_dims is not None:
        settings["max_active_dims"] = model.max_active_dims
    _write_json(root / "config_sentence_transformers.json", settings)
    if model_card is not None:
        atomic_write_text(root / "README.md", model_card)
    return root


def save_multi_vector_encoder(model: MultiVectorEncoder, directory: str | os.PathLike, *,
                              model_card: str | None = None) -> Path:
    """Write ``model`` as a sentence-transformers 6 ``MultiVectorEncoder`` directory at ``directory`` (created if
    missing) that sentence-transformers and bertkit load with the same token vectors; returns it. ``model_card``
    as for :func:`save_sentence_transformer`."""
    root = Path(directory)
    root.mkdir(parents=True, exist_ok=True)
    if model.similarity_fn_name not in ("maxsim", "meanmaxsim"):
        raise ValueError(f"similarity_fn_name must be 'maxsim' or 'meanmaxsim', got {model.similarity_fn_name!r}")
    model.bert.save_pretrained(root)
    model.tokenizer.save_pretrained(root)
    layout = model.layout
    transformer = {"transformer_task": "feature-extraction", "module_output_name": "token_embeddings",
                   "max_seq_length": model.max_seq_length, "do_lower_case": bool(layout.do_lower_case)}
    lengths = {"query_length": layout.query_length, "document_length": layout.document_length,
               "query_expansion": model.query_expansion}
    transformer.update({key: value for key, value in lengths.items() if value is not None})
    _write_json(root / "sentence_bert_config.json", transformer)
    modules = [("", "MultiVectorTransformer")]
    for layer in model.dense:
        modules.append((f"{len(modules)}_Dense", "TokenDense"))
        _save_dense(layer, root / modules[-1][0], TOKENS)
    modules.append((f"{len(modules)}_MultiVectorMask", "MultiVectorMask"))
    _write_json(root / modules[-1][0] / "config.json", {
        "skiplist_words": list(model.skiplist_words), "skiplist_tasks": list(model.skiplist_tasks),
        "keep_only_token_ids": model.keep_only_token_ids})
    if model.normalize_output:
        modules.append((f"{len(modules)}_Normalize", "TokenNormalize"))
        _write_json(root / modules[-1][0] / "config.json", TOKENS)
    if model.token_pooling is not None:
        modules.append((f"{len(modules)}_HierarchicalTokenPooling", "HierarchicalTokenPooling"))
        _write_json(root / modules[-1][0] / "config.json", model.token_pooling.config())
    _write_json(root / "modules.json", [_module(index, path, kind) for index, (path, kind) in enumerate(modules)])
    settings = {"__version__": {"bertkit": _bertkit_version(), "pytorch": torch.__version__},
                "model_type": "MultiVectorEncoder", "prompts": dict(model.prompts),
                "default_prompt_name": model.default_prompt_name, "similarity_fn_name": model.similarity_fn_name}
    if layout.markers:  # PyLate's keys: sentence-transformers 6 then reads each marker as one token, not as text
        settings.update({f"{role}_prefix": marker for role, marker in layout.markers.items()})
        settings["query_expansion"] = model.query_expansion  # else those keys would switch PyLate's default on
    _write_json(root / "config_sentence_transformers.json", settings)
    if model_card is not None:
        atomic_write_text(root / "README.md", model_card)
    return root


def _root_folder(index: int, kind: str) -> str:
    """Folders of a pipeline at a directory's root: the model itself at the root, ``{index}_{kind}`` after it."""
    return "" if index == 0 else f"{index}_{kind}"


def _save_pipeline(model: SentenceTransformer, root: Path, folder, dtype: str | None = None) -> list[tuple[str, str]]:
    """Write a dense pipeline's modules (``folder(index, kind)`` names each one's folder); their ``(path, kind)``:
    the Transformer (BERT, tokenizer, ``sentence_bert_config.json``), Pooling, each Dense, Normalize."""
    path = folder(0, "Transformer")
    model.bert.save_pretrained(root / path, dtype=dtype)
    model.tokenizer.save_pretrained(root / path)
    _write_json(root / path / "sentence_bert_config.json", {"max_seq_length": model.max_seq_length,
                                                            "do_lower_case": bool(model.layout.do_lower_case)})
    modules = [(path, "Transformer"), (folder(1, "Pooling"), "Pooling")]
    _write_json(root / modules[-1][0] / "config.json", _pooling_config(model))
    for layer in model.dense:
        modules.append((folder(len(modules), "Dense"), "Dense"))
        _save_dense(layer, root / modules[-1][0])
    if model.normalize_output:
        modules.append((folder(len(modules), "Normalize"), "Normalize"))
        _write_json(root / modules[-1][0] / "config.json", {})
    return modules


def _save_autoencoder(sae: Any, where: Path) -> None:
    """CSR's ``SparseAutoEncoder``: its config and the tied weights under sentence-transformers' names."""
    from safetensors.torch import save_file

    _write_json(where / "config.json", {"input_dim": sae.input_dim, "hidden_dim": sae.hidden_dim, "k": sae.k,
                                        "normalize": sae.normalize})
    tensors = {"pre_bias": sae.pre_bias, "latent_bias": sae.latent_bias, "decoder.linear.weight": sae.weight}
    tensors = {name: t.detach().float().contiguous().cpu() for name, t in tensors.items()}
    tensors["stats_last_nonzero"] = torch.zeros(sae.hidden_dim, dtype=torch.long)  # training statistics: fresh
    atomic_write(where / "model.safetensors", lambda target: save_file(tensors, target))


def _save_sparse_route(route: Any, root: Path, folder) -> list[tuple[str, str]]:
    """Write one route's modules (``folder(index, kind)`` names each one's folder); their ``(path, kind)``:
    SPLADE (MLMTransformer, SpladePooling), CSR (a dense pipeline, SparseAutoEncoder) or a SparseStaticEmbedding."""
    from safetensors.torch import save_file

    if hasattr(route, "autoencoder"):  # CSR
        modules = _save_pipeline(route.dense, root, folder)
        modules.append((folder(len(modules), "SparseAutoEncoder"), "SparseAutoEncoder"))
        _save_autoencoder(route.autoencoder, root / modules[-1][0])
        return modules
    if hasattr(route, "mlm"):  # SPLADE: the masked LM, then its pooling
        model_path, pooling_path = folder(0, "MLMTransformer"), folder(1, "SpladePooling")
        route.mlm.save_pretrained(root / model_path)
        route.tokenizer.save_pretrained(root / model_path)
        _write_json(root / model_path / "sentence_bert_config.json",
                    {"max_seq_length": route.max_seq_length, "do_lower_case": bool(route.layout.do_lower_case)})
        _write_json(root / pooling_path / "config.json", {"pooling_strategy": route.splade.strategy,
                                                          "activation_function": route.splade.activation})
        return [(model_path, "MLMTransformer"), (pooling_path, "SpladePooling")]
    path = folder(0, "SparseStaticEmbedding")
    route.tokenizer.save_pretrained(root / path)
    weights = {"weight": route.weight.detach().float().contiguous().cpu()}
    atomic_write(root / path / "model.safetensors", lambda target: save_file(weights, target))
    _write_json(root / path / "config.json", {"frozen": False})
    return [(path, "SparseStaticEmbedding")]


def _module(index: int, path: str, kind: str) -> dict[str, Any]:
    return {"idx": index, "name": str(index), "path": path, "type": ALL_TYPES[kind]}


def _pooling_config(model: SentenceTransformer) -> dict[str, Any]:
    """Both spellings: the mode list sentence-transformers >= 5 reads and the flags older versions read."""
    dimension = model.bert.config.hidden_size
    config: dict[str, Any] = {"word_embedding_dimension": dimension, "embedding_dimension": dimension,
                              "pooling_mode": list(model.pooling.modes)}
    config.update({flag: mode in model.pooling.modes for mode, flag in POOLING_MODES.items()})
    config["include_prompt"] = bool(model.pooling.include_prompt)
    if len(model.pooling.modes) == 1:
        config["pooling_mode"] = model.pooling.modes[0]
    return config


def _save_dense(layer: Dense, where: Path, extra: dict[str, Any] | None = None) -> None:
    """A Dense's config (with ``extra`` settings, e.g. the token inputs of a multi-vector model) and weights."""
    from safetensors.torch import save_file

    linear = layer.linear
    activation = type(layer.activation)
    _write_json(where / "config.json", {"in_features": linear.in_features, "out_features": linear.out_features,
                                        "bias": linear.bias is not None,
                                        "activation_function": f"{activation.__module__}.{activation.__name__}",
                                        **(extra or {})})
    tensors = {f"linear.{name}": t.detach().contiguous().cpu() for name, t in linear.state_dict().items()}
    atomic_write(where / "model.safetensors", lambda path: save_file(tensors, path))


def _settings(model: SentenceTransformer) -> dict[str, Any]:
    return {"__version__": {"bertkit": _bertkit_version(), "pytorch": torch.__version__},
            "model_type": "SentenceTransformer", "prompts": dict(model.prompts),
            "default_prompt_name": model.default_prompt_name, "similarity_fn_name": model.similarity_fn_name}


def _bertkit_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("bertkit")
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "unknown"


def _write_json(path: Path, value: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, json.dumps(value, indent=2) + "\n")


def convert_sentence_transformer(source: str | os.PathLike, dest: str | os.PathLike, *, dtype: str | None = None,
                                 overwrite: bool = False, calibration: str | os.PathLike | None = None,
                                 encoding: str = "utf-8") -> Path:
    """The sentence-transformers directory ``source`` rewritten at ``dest`` with its BERT in ``dtype``
    (``"int8"`` / ``"fp32"``; None: as it is); ``dest`` and ``overwrite`` as :func:`bertkit.weights.convert.convert`
    takes them (a failure leaves ``dest`` as it was, and the calibration runs before anything is written).
    ``"int8"`` is static int8 calibrated on the model's own embeddings of the texts in ``calibration`` (a file in
    ``encoding``)
    (:func:`bertkit.tasks.calibrated.calibrated_plan`; None: the default set, or the plan a static int8
    ``source`` has). Returns ``dest``."""
    from bertkit.sentence.model import SentenceTransformer
    from bertkit.tasks.calibrated import calibrated_plan
    from bertkit.weights.convert import _check_destination, replacing_folder
    from bertkit.weights.int8 import PlanState, fitted_plan

    _check_destination(Path(dest), overwrite)  # before the calibration; checked again when writing
    model = SentenceTransformer(source, optimize=False)
    if dtype == "int8" and (calibration is not None or getattr(model.bert, "int8_plan", None) is None):
        plan = calibrated_plan(model, model.tokenizer, calibration, encoding=encoding,
                               embed=lambda texts: model.encode(texts, convert_to_tensor=True))
        model.bert.int8_plan = fitted_plan(PlanState(*plan.to_state()), model.bert)  # named as the BERT's layers
    with replacing_folder(dest, overwrite) as staging:
        save_sentence_transformer(model, staging, dtype=dtype)
    return Path(dest)
