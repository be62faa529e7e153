"""The modules of a sentence-transformers directory, read as they are.

``modules.json`` lists the pipeline: a ``Transformer`` (the BERT, with ``sentence_bert_config.json``:
``max_seq_length``, ``do_lower_case``), a ``Pooling`` (its ``config.json`` names the modes), then optionally
``Dense`` layers (``config.json`` + ``linear.weight`` / ``linear.bias``) and a ``Normalize``. A sparse encoder's
directory (sentence-transformers >= 5) has the masked-LM form instead: an ``MLMTransformer`` (or a ``Transformer``
whose ``sentence_bert_config.json`` says ``"transformer_task": "fill-mask"``) and a ``SpladePooling``.
:func:`read_layout` reads the directory into a :class:`Layout`; :class:`Pooling`, :class:`Dense` and
:class:`SpladePooling` compute what sentence-transformers' modules of the same names compute.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

#: Pooling modes, in the order sentence-transformers concatenates them, and their legacy config flags.
POOLING_MODES = {"cls": "pooling_mode_cls_token", "max": "pooling_mode_max_tokens",
                 "mean": "pooling_mode_mean_tokens", "mean_sqrt_len_tokens": "pooling_mode_mean_sqrt_len_tokens",
                 "weightedmean": "pooling_mode_weightedmean_tokens", "lasttoken": "pooling_mode_lasttoken"}

#: Dense activations a config may name (torch classes only: nothing is imported from a config string).
ACTIVATIONS = {"Tanh": nn.Tanh, "Identity": nn.Identity, "ReLU": nn.ReLU, "GELU": nn.GELU, "Sigmoid": nn.Sigmoid,
               "SiLU": nn.SiLU, "LeakyReLU": nn.LeakyReLU}


class Pooling(nn.Module):
    """Token embeddings ``[B, L, H]`` and the attention mask ``[B, L]`` -> sentence vectors ``[B, k H]``, one
    block per mode. ``prompt_length``: leading tokens (after ``[CLS]``... counted with it) left out of the
    mask when the model was configured with ``include_prompt=False``."""

    def __init__(self, modes: tuple[str, ...] = ("mean",), include_prompt: bool = True):
        super().__init__()
        unknown = [m for m in modes if m not in POOLING_MODES]
        if unknown or not modes:
            raise ValueError(f"pooling modes {unknown or modes} are not among {list(POOLING_MODES)}.")
        self.modes, self.include_prompt = tuple(modes), include_prompt

    def forward(self, tokens: torch.Tensor, mask: torch.Tensor, prompt_length: int = 0) -> torch.Tensor:
        full = mask
        if prompt_length and not self.include_prompt:
            mask = mask.clone()
            mask[:, :prompt_length] = 0
        return torch.cat([getattr(self, "_" + mode)(tokens, mask, full) for mode in self.modes], dim=-1)

    @staticmethod
    def _cls(tokens, mask, full):
        first = mask.to(torch.int).argmax(dim=1)  # the first counted token
        return tokens[torch.arange(tokens.shape[0], device=tokens.device), first]

    @staticmethod
    def _max(tokens, mask, full):
        return tokens.masked_fill(mask[..., None] == 0, float("-inf")).max(dim=1).values

    @staticmethod
    def _sums(tokens, mask):
        weights = mask[..., None].to(tokens.dtype)
        accumulate = torch.float32 if tokens.dtype in (torch.float16, torch.bfloat16) else tokens.dtype
        return (tokens * weights).sum(1, dtype=accumulate), weights.sum(1, dtype=accumulate).clamp(min=1e-9)

    def _mean(self, tokens, mask, full):
        total, count = self._sums(tokens, mask)
        return (total / count).to(tokens.dtype)

    def _mean_sqrt_len_tokens(self, tokens, mask, full):
        total, count = self._sums(tokens, mask)
        return (total / count.sqrt()).to(tokens.dtype)

    @staticmethod
    def _weightedmean(tokens, mask, full):
        positions = torch.arange(1, tokens.shape[1] + 1, device=tokens.device, dtype=torch.float32)
        weights = mask.float()[..., None] * (positions[None] - full.to(torch.int32).argmax(1)[:, None])[..., None]
        return ((tokens * weights).sum(1) / weights.sum(1).clamp(min=1e-9)).to(tokens.dtype)

    @staticmethod
    def _lasttoken(tokens, mask, full):
        length = tokens.shape[1]
        found, from_end = mask.flip(1).max(1)
        last = torch.where(found == 0, 0, length - 1 - from_end)
        rows = torch.arange(tokens.shape[0], device=tokens.device)
        return (tokens * mask[..., None].to(tokens.dtype))[rows, last]


class Dense(nn.Module):
    """``activation(linear(x))`` — sentence-transformers' Dense, with its parameter names (``linear.*``)."""

    def __init__(self, in_features: int, out_features: int, bias: bool = True, activation: str = "Tanh"):
        super().__init__()
        name = activation.rsplit(".", 1)[-1]
        if name not in ACTIVATIONS:
            raise ValueError(f"Dense activation_function {activation!r} is not one of {sorted(ACTIVATIONS)}.")
        self.linear = nn.Linear(in_features, out_features, bias=bias)
        self.activation = ACTIVATIONS[name]()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.activation(self.linear(x))


class SpladePooling(nn.Module):
    """MLM logits and the attention mask -> SPLADE vectors ``[B, V]``: ``log1p(relu(logits))`` (a second ``log1p``
    for ``activation="log1p_relu"``, OpenSearch's models), then the max or the sum over real tokens.

    :meth:`project` is the fast form: from the encoder's hidden states, the masked-LM head runs on the real tokens
    only, packed and a bounded number at a time, and each chunk's logits are reduced at once, so no ``[B, L, V]``
    tensor exists. Max pooling takes the max of the raw logits and activates the ``[B, V]`` result: ReLU and
    ``log1p`` never decrease, so ``max(f(x)) == f(max(x))``: the same numbers, activated once per text instead of
    once per token, and the gradient reaches the same (argmax) token. Padding never counts; every weight is >= 0,
    so an all-padding row is 0 as in sentence-transformers' module.
    """

    STRATEGIES, ACTIVATIONS = ("max", "sum"), ("relu", "log1p_relu")
    #: logits computed at once by :meth:`project` (64 MiB in float32): large enough that the head's product runs
    #: at its full rate (it reads the whole vocabulary's weights once per chunk), small enough to stay bounded
    CHUNK_ELEMENTS = 1 << 24

    def __init__(self, strategy: str = "max", activation: str = "relu"):
        super().__init__()
        if strategy not in self.STRATEGIES:
            raise ValueError(f"SpladePooling pooling_strategy {strategy!r} is not one of {self.STRATEGIES}.")
        if activation not in self.ACTIVATIONS:
            raise ValueError(f"SpladePooling activation_function {activation!r} is not one of {self.ACTIVATIONS}.")
        self.strategy, self.activation = strategy, activation

    def forward(self, logits: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """``[B, L, V]`` logits (any float dtype) -> float32 ``[B, V]``."""
        real = mask.bool()[..., None]
        if self.strategy == "max":
            return self.activate(logits.masked_fill(~real, float("-inf")).amax(dim=1).float())
        return self.activate(logits.float()).masked_fill(~real, 0).sum(dim=1)

    def activate(self, x: torch.Tensor, inplace: bool = False) -> torch.Tensor:
        """``log1p(relu(x))`` (twice ``log1p`` for ``log1p_relu``); ``inplace`` overwrites ``x``."""
        x = x.relu_().log1p_() if inplace else x.relu().log1p()
        if self.activation == "log1p_relu":
            x = x.log1p_() if inplace else x.log1p()
        return x

    def project(self, hidden: torch.Tensor, mask: torch.Tensor, head: Callable[[torch.Tensor], torch.Tensor],
                vocab_size: int, chunk_tokens: int | None = None) -> torch.Tensor:
        """SPLADE vectors (float32 ``[B, V]``) from hidden states ``[B, L, H]``: ``head`` (the MLM head, ``[n, H] ->
        [n, V]``) runs on the real tokens of ``mask`` only, ``chunk_tokens`` at a time (default: about
        :data:`CHUNK_ELEMENTS` logits), and each chunk is reduced before the next is computed. Differentiable."""
        real = mask.bool()
        lengths = real.sum(1).tolist()
        tokens = hidden[real]  # [N, H], row after row
        step = chunk_tokens or max(1, self.CHUNK_ELEMENTS // vocab_size)
        inplace = not torch.is_grad_enabled()  # encoding: activate each chunk where it lies
        pieces: list[list[torch.Tensor]] = [[] for _ in lengths]
        for begin in range(0, len(tokens), step):
            logits = head(tokens[begin:begin + step])
            if self.strategy == "sum":
                logits = self.activate(logits.float(), inplace=inplace)  # a fresh tensor of the head's
            for row, start, stop in _row_parts(lengths, begin, begin + len(logits)):
                part = logits[start - begin:stop - begin]
                pieces[row].append(part.amax(0) if self.strategy == "max" else part.sum(0))
        reduce = torch.maximum if self.strategy == "max" else torch.add
        empty = hidden.new_zeros(vocab_size, dtype=torch.float32)  # a row without real tokens: 0, as the reference
        rows = [functools.reduce(reduce, row).float() if row else empty for row in pieces]
        out = torch.stack(rows) if rows else hidden.new_zeros(0, vocab_size, dtype=torch.float32)
        return self.activate(out, inplace=inplace) if self.strategy == "max" else out


def _row_parts(lengths: list[int], begin: int, end: int) -> Iterator[tuple[int, int, int]]:
    """``(row, start, stop)``: the packed positions ``[start, stop)`` of each row (``lengths`` tokens each, one row
    after the other) that fall inside ``[begin, end)``."""
    start = 0
    for row, length in enumerate(lengths):
        stop = start + length
        if stop > begin and start < end and length:
            yield row, max(start, begin), min(stop, end)
        if stop >= end:
            return
        start = stop


class SparseAutoEncoder(nn.Module):
    """CSR's sparse head over a dense sentence vector ``[B, D]``: (standardised when ``normalize``), less
    ``pre_bias``, through the tied encoder with ``latent_bias``, then the ``k`` largest latents kept and ReLU'd
    -> ``[B, hidden_dim]``, as sentence-transformers' module of the same name at inference."""

    def __init__(self, input_dim: int, hidden_dim: int, k: int, normalize: bool = False):
        super().__init__()
        self.input_dim, self.hidden_dim, self.k, self.normalize = input_dim, hidden_dim, k, normalize
        self.pre_bias = nn.Parameter(torch.zeros(input_dim))
        self.latent_bias = nn.Parameter(torch.zeros(hidden_dim))
        self.weight = nn.Parameter(torch.zeros(hidden_dim, input_dim))  # the encoder's (the decoder is its transpose)

    def forward(self, x: torch.Tensor, k: int | None = None) -> torch.Tensor:
        if self.normalize:  # unbiased std, as the reference computes it
            x = x - x.mean(dim=-1, keepdim=True)
            x = x / (x.std(dim=-1, keepdim=True) + 1e-5)
        latents = F.linear(x - self.pre_bias, self.weight, self.latent_bias)
        top = latents.topk(min(k or self.k, self.hidden_dim), dim=-1)
        return torch.zeros_like(latents).scatter(-1, top.indices, top.values).relu()


@dataclass
class Layout:
    """What a sentence-transformers directory holds: where the BERT is, and the modules after it."""

    transformer: Path
    max_seq_length: int | None = None
    do_lower_case: bool = False
    pooling: Pooling = field(default_factory=Pooling)
    dense: list[Dense] = field(default_factory=list)
    normalize: bool = False
    prompts: dict[str, str] = field(default_factory=dict)
    default_prompt_name: str | None = None
    similarity_fn_name: str | None = None
    masked_lm: bool = False  # the transformer's output is its MLM logits (a sparse encoder's)
    splade: SpladePooling | None = None
    max_active_dims: int | None = None
    static: bool = False  # ``transformer`` holds a SparseStaticEmbedding: a tokenizer and a weight per token
    static_embedding: bool = False  # ``transformer`` holds a StaticEmbedding: a tokenizer and a vector per token
    routes: dict[str, Layout] = field(default_factory=dict)  # a Router's pipelines by task (query, document)
    default_route: str | None = None
    autoencoder: SparseAutoEncoder | None = None  # CSR: a sparse head after the dense modules
    model_type: str | None = None  # config_sentence_transformers.json's (``MultiVectorEncoder``, ...)
    query_length: int | None = None  # a multi-vector Transformer's per-task token limits
    document_length: int | None = None
    query_expansion: dict[str, Any] | None = None  # ColBERT's [MASK] padding of queries (see multi_vector.py)
    token_mask: dict[str, Any] | None = None  # a MultiVectorMask's settings: skiplist_words, skiplist_tasks, ...
    markers: dict[str, str] = field(default_factory=dict)  # ColBERT's [Q]/[D] tokens that start a task's prompt
    token_pooling: dict[str, Any] | None = None  # a HierarchicalTokenPooling's settings (the pipeline's last module)


def is_sentence_transformer(path: str | Path) -> bool:
    """Whether ``path`` is a sentence-transformers directory (it has ``modules.json``)."""
    return (Path(path) / "modules.json").is_file()


def is_multi_vector(layout: Layout) -> bool:
    """Whether a read directory is a multi-vector (ColBERT) model's: its model type, or a MultiVectorMask."""
    return layout.model_type in ("MultiVectorEncoder", "ColBERT") or layout.token_mask is not None


def read_layout(root: str | Path) -> Layout:
    """The :class:`Layout` of the sentence-transformers directory ``root``; ValueError for a module type
    bertkit does not run (naming it)."""
    root = Path(root)
    entries = sorted(_json(root / "modules.json"), key=lambda m: m.get("idx", 0))
    layout = _modules(root, [(entry["type"], entry.get("path", "")) for entry in entries], root / "modules.json")
    settings = root / "config_sentence_transformers.json"
    extra = _json(settings) if settings.is_file() else {}
    layout.prompts = dict(extra.get("prompts") or {})
    layout.default_prompt_name = extra.get("default_prompt_name")
    layout.similarity_fn_name = extra.get("similarity_fn_name")
    layout.max_active_dims = extra.get("max_active_dims")
    layout.model_type = extra.get("model_type")
    return layout


def _modules(root: Path, modules: list[tuple[str, str]], listed_in: Path) -> Layout:
    """The layout of one pipeline of ``(type, path)`` modules (the directory's, or one route of a Router)."""
    layout: Layout | None = None
    for name, path in modules:
        kind, where = name.rsplit(".", 1)[-1], root / path
        if kind in ("Transformer", "MLMTransformer"):
            layout = Layout(transformer=where, **_transformer_settings(where, root))
            layout.masked_lm = kind == "MLMTransformer" or _fill_mask(where, root)
        elif kind == "StaticEmbedding":  # a tokenizer and a vector per token (bertkit.sentence.static reads it)
            layout = Layout(transformer=where, static_embedding=True)
        elif kind == "SparseStaticEmbedding":  # a tokenizer and one weight per vocabulary entry, no model
            layout = Layout(transformer=where, static=True)
        elif kind == "Router" and len(modules) == 1:
            layout = _router(root, where)
        elif layout is None:
            raise ValueError(f"{listed_in}: {kind} comes before the Transformer module.")
        elif kind == "Pooling":
            layout.pooling = _pooling(_json(where / "config.json"))
        elif kind == "Dense":
            layout.dense.append(_dense(where))
        elif kind == "Normalize":
            layout.normalize = True
        elif layout.token_pooling is not None:  # pooled vectors are what the model gives: nothing runs after
            raise ValueError(f"{listed_in}: {kind} comes after the HierarchicalTokenPooling; bertkit runs the token "
                             "pooling as the last module.")
        elif kind == "MultiVectorMask":  # which token vectors a multi-vector model scores
            layout.token_mask = _json(where / "config.json")
        elif kind == "HierarchicalTokenPooling":
            layout.token_pooling = _json(where / "config.json")
        elif kind == "SparseAutoEncoder":
            layout.autoencoder = _autoencoder(where)
        elif kind == "SpladePooling":
            config = _json(where / "config.json")
            layout.splade = SpladePooling(config.get("pooling_strategy", "max"),
                                          config.get("activation_function", "relu"))
        else:
            raise ValueError(f"{listed_in} names a {name} module; bertkit runs Transformer, MLMTransformer, "
                             "Pooling, Dense, Normalize, SpladePooling, StaticEmbedding, SparseStaticEmbedding, "
                             "SparseAutoEncoder, "
                             "MultiVectorMask, HierarchicalTokenPooling and a Router of them.")
    if layout is None:
        raise ValueError(f"{listed_in} has no Transformer module.")
    return layout


def masked_lm_layout(path: str | Path) -> Layout:
    """A plain checkpoint (``config.json`` and weights, no ``modules.json``) read as sentence-transformers' sparse
    encoder reads a masked LM: its MLM head under a max ``SpladePooling`` (ReLU, ``log1p``)."""
    path = Path(path)
    if not (path / "config.json").is_file():
        raise ValueError(f"{path} is neither a sentence-transformers directory (no modules.json) nor a checkpoint (no "
                         "config.json); pass a sparse encoder directory or a masked-LM checkpoint.")
    return Layout(transformer=path, masked_lm=True, splade=SpladePooling("max"), **_transformer_settings(path, path))


def _router(root: Path, where: Path) -> Layout:
    """A Router: one layout per route (``query``, ``document``) from ``router_config.json``."""
    config = _json(where / "router_config.json")
    types, parameters = config.get("types", {}), config.get("parameters", {})
    routes = {route: _modules(where, [(types[name], name) for name in names], where / "router_config.json")
              for route, names in config.get("structure", {}).items()}
    default = parameters.get("default_route")
    if not routes or (default is not None and default not in routes):
        raise ValueError(f"{where / 'router_config.json'}: no routes, or a default_route {default!r} that is not "
                         "one of them.")
    if parameters.get("route_mappings"):
        raise ValueError(f"{where / 'router_config.json'} has route_mappings; bertkit routes by task name only "
                         "(query, document): remove them or route by the task names.")
    return Layout(transformer=where, routes=routes, default_route=default)


def _json(path: Path) -> Any:
    """A sentence-transformers settings file; a damaged one is a ValueError naming it, line and column."""
    from bertkit.io import read_json

    return read_json(path, f"sentence-transformers' {path.name} settings")


def _transformer_settings(where: Path, root: Path) -> dict[str, Any]:
    """``max_seq_length`` from ``sentence_bert_config.json``, else (sentence-transformers >= 6 writes it there)
    the tokenizer's ``model_max_length``; ``do_lower_case``."""
    settings: dict[str, Any] = {}
    for folder in (where, root):
        if (folder / "sentence_bert_config.json").is_file():
            settings = _json(folder / "sentence_bert_config.json")
            break
    length = settings.get("max_seq_length")
    if length is None and (where / "tokenizer_config.json").is_file():
        length = _json(where / "tokenizer_config.json").get("model_max_length")
        length = length if isinstance(length, int) and length < 1_000_000 else None  # HF's "unset" is 1e30
    return {"max_seq_length": length, "do_lower_case": bool(settings.get("do_lower_case", False)),
            **{key: settings.get(key) for key in ("query_length", "document_length", "query_expansion")}}


def _fill_mask(where: Path, root: Path) -> bool:
    """Whether a ``Transformer`` module runs its masked-LM head (sentence-transformers >= 6's fill-mask task)."""
    for folder in (where, root):
        if (folder / "sentence_bert_config.json").is_file():
            return _json(folder / "sentence_bert_config.json").get("transformer_task") == "fill-mask"
    return False


def _pooling(config: dict[str, Any]) -> Pooling:
    modes = config.get("pooling_mode")
    if modes is None:  # the boolean flags of sentence-transformers < 5
        modes = [mode for mode, flag in POOLING_MODES.items() if config.get(flag)]
    modes = (modes,) if isinstance(modes, str) else tuple(modes)
    return Pooling(modes or ("mean",), include_prompt=config.get("include_prompt", True))


def _dense(where: Path) -> Dense:
    from bertkit.weights.hf import read_state_dict

    config = _json(where / "config.json")
    module = Dense(config["in_features"], config["out_features"], config.get("bias", True),
                   config.get("activation_function", "torch.nn.modules.activation.Tanh"))
    module.load_state_dict(read_state_dict(where))
    return module


def _autoencoder(where: Path) -> SparseAutoEncoder:
    from bertkit.weights.hf import read_state_dict

    config = _json(where / "config.json")
    module = SparseAutoEncoder(config["input_dim"], config.get("hidden_dim", 512), config.get("k", 8),
                               bool(config.get("normalize", False)))
    weights = read_state_dict(where)
    tied = weights.get("decoder.linear.weight", weights.get("encoder.weight"))
    if tied is None or "pre_bias" not in weights or "latent_bias" not in weights:
        raise ValueError(f"{where}: a SparseAutoEncoder needs pre_bias, latent_bias and decoder.linear.weight; "
                         f"found {sorted(weights)}.")
    module.load_state_dict({"pre_bias": weights["pre_bias"], "latent_bias": weights["latent_bias"], "weight": tied})
    return module


def normalize(x: torch.Tensor) -> torch.Tensor:
    return F.normalize(x, p=2, dim=-1)
