"""The d2l (Dive into Deep Learning, 1.0.3) BERT API on bertkit's engine.

``get_tokens_and_segments``, ``BERTEncoder``, ``MaskLM``, ``NextSentencePred`` and
``BERTModel`` take d2l 1.0.3's arguments and return what its released code returns,
to float rounding, given the same weights (:func:`load_d2l_state_dict` copies a real
d2l module's weights in; :func:`to_d2l_state_dict` goes back). The encoder is a bertkit
:class:`~bertkit.BERT` configured as d2l's architecture: no embedding LayerNorm and no
embedding dropout, ReLU feed-forward, a learned position table, LayerNorm eps 1e-5,
post-LN blocks; the MLM head is bertkit's (dense -> ReLU -> LayerNorm -> decoder,
untied). Parameters start as d2l's do (PyTorch's default initialisation).

The pre-1.0 d2l signatures that the book's older text shows are accepted too:
``BERTEncoder(vocab_size, num_hiddens, norm_shape, ffn_num_input, ffn_num_hiddens,
num_heads, num_layers, dropout, max_len=1000, key_size=768, query_size=768,
value_size=768)`` (recognised by ``norm_shape`` being a list) and the same names as
keywords; their input widths must equal ``num_hiddens`` as they must in a working d2l model.

Known difference: a sequence with ``valid_lens == 0`` attends uniformly in d2l and
to all keys by score here; neither output means anything.

``get_tokens_and_segments`` builds d2l's ``<cls> A <sep> B <sep>`` token lists; its
real-BERT counterpart is :meth:`bertkit.BERTTokenizerFast.__call__` with a text pair.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable, Mapping

import torch
from torch import nn

from bertkit.config import BERTConfig
from bertkit.modeling.backbone import BERT
from bertkit.modeling.heads import gather_positions
from bertkit.modeling.layers import BERTLMPredictionHead

__all__ = ["BERTEncoder", "BERTModel", "MaskLM", "NextSentencePred", "get_tokens_and_segments",
           "load_d2l_state_dict", "to_d2l_state_dict", "valid_lens_to_mask"]


def get_tokens_and_segments(tokens_a: list[str], tokens_b: list[str] | None = None) -> tuple[list[str], list[int]]:
    """``(['<cls>', *a, '<sep>', *b, '<sep>'], segment ids 0 for <cls> A <sep>, 1 for B <sep>)``."""
    tokens = ["<cls>", *tokens_a, "<sep>"]
    segments = [0] * len(tokens)
    if tokens_b is not None:
        tokens += [*tokens_b, "<sep>"]
        segments += [1] * (len(tokens_b) + 1)
    return tokens, segments


# ---------------------------------------------------------------------------- arguments

def _encoder_args(vocab_size: int, num_hiddens: int, ffn_num_hiddens: int, num_heads: int, num_blks: int,
                  dropout: float, max_len: int = 1000) -> None:
    """d2l 1.0.3's ``BERTEncoder`` and ``BERTModel`` arguments (a signature template)."""


#: The pre-1.0 positional orders, and their names for input widths (all num_hiddens in a working model).
_OLD_ENCODER_ORDER = ("vocab_size", "num_hiddens", "norm_shape", "ffn_num_input", "ffn_num_hiddens", "num_heads",
                      "num_layers", "dropout", "max_len", "key_size", "query_size", "value_size")
_OLD_MODEL_ORDER = (*_OLD_ENCODER_ORDER, "hid_in_features", "mlm_in_features", "nsp_in_features")
_WIDTH_NAMES = ("norm_shape", "ffn_num_input", "key_size", "query_size", "value_size", "hid_in_features",
                "mlm_in_features", "nsp_in_features")


def _with_self(template: Callable) -> inspect.Signature:
    self = inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)
    return inspect.Signature([self, *inspect.signature(template).parameters.values()])


def _d2l_arguments(owner: str, args: tuple, kwargs: dict, old_order: tuple[str, ...]) -> dict:
    """Resolve a 1.0.3-style or pre-1.0-style constructor call to 1.0.3's arguments.

    Raises ``TypeError`` for arguments neither accepts and ``ValueError`` when an old
    input width (``norm_shape``, ``key_size``...) disagrees with ``num_hiddens``.
    """
    kwargs = dict(kwargs)
    if len(args) > 2 and isinstance(args[2], (list, tuple, torch.Size)):  # norm_shape: the pre-1.0 order
        if len(args) > len(old_order):
            raise TypeError(f"{owner}() takes at most {len(old_order)} positional arguments in d2l's pre-1.0 "
                            f"form, got {len(args)}.")
        for name, value in zip(old_order, args):
            if name in kwargs:
                raise TypeError(f"{owner}() got multiple values for argument {name!r}.")
            kwargs[name] = value
        args = ()
    if "num_layers" in kwargs:
        if "num_blks" in kwargs:
            raise TypeError(f"{owner}() got both num_blks and its old name num_layers; pass one.")
        kwargs["num_blks"] = kwargs.pop("num_layers")
    widths = {name: kwargs.pop(name) for name in _WIDTH_NAMES if name in old_order and name in kwargs}
    try:
        bound = inspect.signature(_encoder_args).bind(*args, **kwargs)
    except TypeError as e:
        raise TypeError(f"{owner}(): {e}") from None
    bound.apply_defaults()
    resolved = dict(bound.arguments)
    h = resolved["num_hiddens"]
    for name, value in widths.items():
        shape = list(value) if isinstance(value, (list, tuple, torch.Size)) else [value]
        if shape != [h]:
            raise ValueError(f"{owner}(): {name}={value!r} must be {[h] if name == 'norm_shape' else h} "
                             f"(num_hiddens); every input of a d2l BERT block is num_hiddens wide.")
    return resolved


def _d2l_config(vocab_size: int, num_hiddens: int, ffn_num_hiddens: int, num_heads: int, num_blks: int,
                dropout: float, max_len: int = 1000) -> BERTConfig:
    """The engine config of d2l's BERT: ReLU, eps 1e-5, two segments, no embedding LayerNorm.

    Its special token ids are the engine's defaults, not d2l's: d2l 1.0.3's ``Vocab`` sorts
    its tokens, so ``'<mask>'`` and the others have corpus-dependent ids (``vocab['<mask>']``).
    The encoder never reads them.
    """
    return BERTConfig(vocab_size=vocab_size, hidden_size=num_hiddens, num_attention_heads=num_heads,
                      num_hidden_layers=num_blks, intermediate_size=ffn_num_hiddens, hidden_act="relu",
                      hidden_dropout_prob=dropout, attention_probs_dropout_prob=dropout,
                      max_position_embeddings=max_len, type_vocab_size=2, layer_norm_eps=1e-5,
                      embedding_layer_norm=False, attention_bias=True, tie_word_embedding=False)


@torch.no_grad()
def _torch_default_init_(module: nn.Module) -> None:
    """PyTorch's default initialisation, which d2l keeps (embeddings and the position table N(0, 1))."""
    for m in module.modules():
        if isinstance(m, (nn.Linear, nn.Embedding, nn.LayerNorm)):
            m.reset_parameters()  # a LazyLinear initialises itself when it sees its input


def valid_lens_to_mask(valid_lens: torch.Tensor | None, length: int) -> torch.Tensor | None:
    """d2l's ``valid_lens`` as the engine's boolean attention mask (key j visible iff j < valid length).

    ``[B]`` (per sequence) -> ``[B, S]``; ``[B, L]`` (per query) -> ``[B, L, S]``; None -> None.
    Integer or float lengths, as d2l's data pipeline produces.
    """
    if valid_lens is None:
        return None
    keys = torch.arange(length, device=valid_lens.device)
    if valid_lens.dim() not in (1, 2):
        raise ValueError(f"valid_lens must be [batch] or [batch, seq], got shape {tuple(valid_lens.shape)}.")
    return keys < valid_lens.unsqueeze(-1)  # [B] -> [B, S];  [B, L] -> [B, L, S]


# ---------------------------------------------------------------------------- models

class BERTEncoder(nn.Module):
    """d2l's BERT encoder: ``forward(tokens [B, L], segments [B, L], valid_lens [B] | [B, L] | None)`` -> ``[B, L, H]``.

    Arguments as d2l 1.0.3: ``(vocab_size, num_hiddens, ffn_num_hiddens, num_heads, num_blks,
    dropout, max_len=1000)`` (and the pre-1.0 form, see the module docstring). The engine
    model is ``self.bert`` (a :class:`~bertkit.BERT` without pooler) and its config ``self.config``.
    """

    def __init__(self, *args, **kwargs):
        super().__init__()
        self.config = _d2l_config(**_d2l_arguments("BERTEncoder", args, kwargs, _OLD_ENCODER_ORDER))
        self.bert = BERT(self.config, add_pooling_layer=False)
        embeddings = self.bert.embeddings
        embeddings.dropout = nn.Identity()  # d2l drops out inside the blocks only
        embeddings.word_embeddings.padding_idx = None  # d2l's token embedding trains every row
        _torch_default_init_(self.bert)

    __init__.__signature__ = _with_self(_encoder_args)

    def forward(self, tokens: torch.Tensor, segments: torch.Tensor,
                valid_lens: torch.Tensor | None = None) -> torch.Tensor:
        mask = valid_lens_to_mask(valid_lens, tokens.shape[1])
        return self.bert(tokens, attention_mask=mask, token_type_ids=segments)[0]


class MaskLM(nn.Module):
    """d2l's MLM head: ``forward(X [B, L, num_inputs], pred_positions [B, P])`` -> ``[B, P, vocab_size]``.

    ``mlp`` is bertkit's MLM head (dense -> ReLU -> LayerNorm(eps 1e-5) -> decoder, untied).
    ``num_inputs`` (the pre-1.0 argument) fixes the input width; None infers it from the
    first input, as d2l 1.0.3's ``LazyLinear`` does.
    """

    def __init__(self, vocab_size: int, num_hiddens: int, num_inputs: int | None = None):
        super().__init__()
        head_config = BERTConfig(vocab_size=vocab_size, hidden_size=num_hiddens, num_attention_heads=1,
                                 hidden_act="relu", layer_norm_eps=1e-5, tie_word_embedding=False)
        self.mlp = BERTLMPredictionHead(head_config)
        if num_inputs != num_hiddens:
            self.mlp.transform.dense = nn.LazyLinear(num_hiddens) if num_inputs is None \
                else nn.Linear(num_inputs, num_hiddens)
        _torch_default_init_(self.mlp)  # the decoder bias starts like a Linear's, as in d2l

    def forward(self, X: torch.Tensor, pred_positions: torch.Tensor) -> torch.Tensor:
        return self.mlp(gather_positions(X, pred_positions))  # [B, P, H] -> [B, P, V]


class NextSentencePred(nn.Module):
    """d2l's NSP head: ``forward(X [B, num_inputs])`` -> ``[B, 2]``.

    d2l 1.0.3 takes no arguments (a ``LazyLinear``); ``num_inputs`` (the pre-1.0 argument)
    fixes the input width.
    """

    def __init__(self, num_inputs: int | None = None):
        super().__init__()
        self.output = nn.LazyLinear(2) if num_inputs is None else nn.Linear(num_inputs, 2)

    def forward(self, X: torch.Tensor) -> torch.Tensor:
        return self.output(X)


class BERTModel(nn.Module):
    """d2l's BERT: ``encoder``, ``hidden`` (Linear + Tanh on ``<cls>``), ``mlm`` and ``nsp``.

    Arguments as :class:`BERTEncoder`; the pre-1.0 ``hid_in_features``, ``mlm_in_features``
    and ``nsp_in_features`` are accepted and must equal ``num_hiddens``.
    """

    def __init__(self, *args, **kwargs):
        super().__init__()
        arguments = _d2l_arguments("BERTModel", args, kwargs, _OLD_MODEL_ORDER)
        h = arguments["num_hiddens"]
        self.encoder = BERTEncoder(**arguments)
        self.hidden = nn.Sequential(nn.Linear(h, h), nn.Tanh())
        self.mlm = MaskLM(arguments["vocab_size"], h, num_inputs=h)
        self.nsp = NextSentencePred(h)

    __init__.__signature__ = _with_self(_encoder_args)

    def forward(self, tokens: torch.Tensor, segments: torch.Tensor, valid_lens: torch.Tensor | None = None,
                pred_positions: torch.Tensor | None = None
                ) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor]:
        """``(encoded_X [B, L, H], mlm_Y_hat [B, P, V] or None without pred_positions, nsp_Y_hat [B, 2])``."""
        encoded_X = self.encoder(tokens, segments, valid_lens)
        mlm_Y_hat = self.mlm(encoded_X, pred_positions) if pred_positions is not None else None
        nsp_Y_hat = self.nsp(self.hidden(encoded_X[:, 0, :]))  # position 0 holds '<cls>'
        return encoded_X, mlm_Y_hat, nsp_Y_hat


# ---------------------------------------------------------------------------- weights

def _squeeze_position_table(t: torch.Tensor) -> torch.Tensor:
    return t.squeeze(0)  # d2l's [1, max_len, H] -> the engine's [max_len, H]


def _unsqueeze_position_table(t: torch.Tensor) -> torch.Tensor:
    return t.unsqueeze(0)


#: (d2l name, bertkit name[, d2l -> bertkit, bertkit -> d2l]). A name covers the parameters
#: below it (``.weight``, ``.bias``); ``{i}`` is a block index.
_Rule = tuple
_ENCODER_TABLE: tuple[_Rule, ...] = (
    ("token_embedding", "bert.embeddings.word_embeddings"),
    ("segment_embedding", "bert.embeddings.token_type_embeddings"),
    ("pos_embedding", "bert.embeddings.position_embeddings.weight",
     _squeeze_position_table, _unsqueeze_position_table),
    ("blks.{i}.attention.W_q", "bert.encoder.layer.{i}.attention.self.query"),
    ("blks.{i}.attention.W_k", "bert.encoder.layer.{i}.attention.self.key"),
    ("blks.{i}.attention.W_v", "bert.encoder.layer.{i}.attention.self.value"),
    ("blks.{i}.attention.W_o", "bert.encoder.layer.{i}.attention.output.dense"),
    ("blks.{i}.addnorm1.ln", "bert.encoder.layer.{i}.attention.output.LayerNorm"),
    ("blks.{i}.ffn.dense1", "bert.encoder.layer.{i}.intermediate.dense"),
    ("blks.{i}.ffn.dense2", "bert.encoder.layer.{i}.output.dense"),
    ("blks.{i}.addnorm2.ln", "bert.encoder.layer.{i}.output.LayerNorm"),
)
_MASK_LM_TABLE: tuple[_Rule, ...] = (
    ("mlp.0", "mlp.transform.dense"),
    ("mlp.2", "mlp.transform.LayerNorm"),
    ("mlp.3.weight", "mlp.decoder.weight"),
    ("mlp.3.bias", "mlp.bias"),  # also mlp.decoder.bias: the same parameter
)
_NSP_TABLE: tuple[_Rule, ...] = (("output", "output"),)


def _prefixed(prefix: str, table: tuple[_Rule, ...]) -> tuple[_Rule, ...]:
    return tuple((prefix + src, prefix + dst, *rest) for src, dst, *rest in table)


_TABLES: dict[type, tuple[_Rule, ...]] = {
    BERTEncoder: _ENCODER_TABLE,
    MaskLM: _MASK_LM_TABLE,
    NextSentencePred: _NSP_TABLE,
    BERTModel: (*_prefixed("encoder.", _ENCODER_TABLE), ("hidden.0", "hidden.0"),
                *_prefixed("mlm.", _MASK_LM_TABLE), *_prefixed("nsp.", _NSP_TABLE)),
}


def _pattern(template: str) -> re.Pattern:
    return re.compile("^" + re.escape(template).replace(r"\{i\}", r"(?P<i>\d+)") + r"(?P<rest>(\..+)?)$")


def _rename(key: str, table: tuple[_Rule, ...], inverse: bool) -> tuple[str, Callable | None] | None:
    """The one mapper: ``key`` renamed by the first matching rule (and its tensor conversion), or None."""
    for src, dst, *convert in table:
        src, dst = (dst, src) if inverse else (src, dst)
        m = _pattern(src).match(key)
        if m:
            name = dst.replace("{i}", m.group("i") or "") if "{i}" in dst else dst
            fn = (convert[1] if inverse else convert[0]) if convert else None
            return name + m.group("rest"), fn
    return None


def _table_of(module: nn.Module) -> tuple[_Rule, ...]:
    for cls, table in _TABLES.items():
        if isinstance(module, cls):
            return table
    raise TypeError(f"module must be a bertkit.compat.d2l BERTEncoder, MaskLM, NextSentencePred or BERTModel, "
                    f"got {type(module).__name__}.")


def load_d2l_state_dict(module: nn.Module, d2l_state_dict: Mapping[str, torch.Tensor] | nn.Module) -> nn.Module:
    """Copy a real d2l module's weights (its ``state_dict()``, or the module) into ``module``; returns it.

    ``module`` is this module's ``BERTEncoder``, ``MaskLM``, ``NextSentencePred`` or
    ``BERTModel``, built with the d2l model's sizes. Raises ``ValueError`` naming unknown or
    missing keys, mismatched shapes, or d2l ``LazyLinear`` weights not yet materialised.
    """
    if isinstance(d2l_state_dict, nn.Module):
        d2l_state_dict = d2l_state_dict.state_dict()
    table = _table_of(module)
    ours = module.state_dict(keep_vars=True)
    converted: dict[str, torch.Tensor] = {}
    source: dict[str, str] = {}  # our name -> the d2l key it came from
    unknown, lazy = [], []
    for key, tensor in d2l_state_dict.items():
        renamed = _rename(key, table, inverse=False)
        if renamed is None or renamed[0] not in ours:
            unknown.append(key)
        elif isinstance(tensor, nn.parameter.UninitializedParameter):
            lazy.append(key)
        else:
            name, fn = renamed
            converted[name], source[name] = (fn(tensor) if fn else tensor), key
    if unknown:
        raise ValueError(f"load_d2l_state_dict: keys not in d2l's {type(module).__name__} or not matching this "
                         f"model's sizes: {sorted(unknown)}.")
    if lazy:
        raise ValueError(f"load_d2l_state_dict: {sorted(lazy)} are uninitialised LazyLinear weights; run one "
                         "forward pass of the d2l model before copying its weights.")
    for name in set(ours) - set(converted):  # a parameter shared under two names (mlp.bias, mlp.decoder.bias)
        twin = next((other for other in converted if ours[other] is ours[name]), None)
        if twin is not None:
            converted[name], source[name] = converted[twin], source[twin]
    missing = sorted(set(ours) - set(converted))
    if missing:
        d2l_names = [(_rename(name, table, inverse=True) or (name,))[0] for name in missing]
        raise ValueError(f"load_d2l_state_dict: the d2l state dict lacks {d2l_names} (bertkit names {missing}).")
    mismatched = [f"{source[name]} -> {name}: {tuple(converted[name].shape)} vs {tuple(ours[name].shape)}"
                  for name in ours if not isinstance(ours[name], nn.parameter.UninitializedParameter)
                  and converted[name].shape != ours[name].shape]
    if mismatched:
        raise ValueError("load_d2l_state_dict: shapes differ, d2l's vs ours (was the d2l model built with other "
                         "sizes?): "
                         + "; ".join(mismatched))
    module.load_state_dict(converted, strict=True)
    return module


def to_d2l_state_dict(module: nn.Module) -> dict[str, torch.Tensor]:
    """The inverse of :func:`load_d2l_state_dict`: ``module``'s weights under d2l 1.0.3's names."""
    table = _table_of(module)
    out: dict[str, torch.Tensor] = {}
    seen: set[int] = set()
    for name, tensor in module.state_dict(keep_vars=True).items():
        if id(tensor) in seen:
            continue  # the second name of a shared parameter
        seen.add(id(tensor))
        renamed = _rename(name, table, inverse=True)
        if renamed is None:
            raise ValueError(f"to_d2l_state_dict: {name} has no d2l counterpart.")
        d2l_name, fn = renamed
        tensor = tensor.detach()
        out[d2l_name] = fn(tensor) if fn else tensor
    return out
