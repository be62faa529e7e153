"""The d2l (Dive into Deep Learning, 1.0.3) BERT API on bertkit's engine.

``get_tokens_and_segments``, ``BERTEncoder``, ``MaskLM``, ``NextSentencePred`` and
``BERTModel`` take d2l 1.0.3's arguments and return what its released code returns,
to float rounding, given the same weights. The encoder is a bertkit :class:`~bertkit.BERT`
configured as d2l's architecture: no embedding LayerNorm and no embedding dropout, ReLU
feed-forward, a learned position table, LayerNorm eps 1e-5, post-LN blocks; the MLM head
is bertkit's (dense -> ReLU -> LayerNorm -> decoder, untied). Parameters start as d2l's do
(PyTorch's default initialisation).

d2l's attribute names are views of the engine's modules, read-only: ``encoder.token_embedding``,
``segment_embedding`` (the engine's embedding modules), ``pos_embedding`` (a ``[1, max_len, H]``
view of the engine's position table, sharing its storage; its gradient lives on
``bert.embeddings.position_embeddings.weight``) and ``blks`` (the engine's layers,
``bert.encoder.layer``, whose own attributes are the engine's). ``BERTModel.encoder``,
``hidden``, ``mlm``, ``mlm.mlp``, ``nsp`` and ``nsp.output`` are the modules themselves.

State dicts: ``state_dict()`` uses d2l 1.0.3's names and shapes (``encoder.pos_embedding``
``[1, max_len, H]``, ``encoder.blks.0.attention.W_q.weight``, ``mlm.mlp.3.bias``...), in
d2l's order, so ``torch.save(net.state_dict(), path)`` writes a file d2l loads and a d2l
file loads here; ``load_state_dict`` accepts d2l's names and the engine's (``bert.*``,
``mlp.transform.*``), strictly. Both hold in any module that contains these ones (d2l's
fine-tuning models keep ``bert.encoder``). One table per module maps the names (``_ENCODER_TABLE``,
``_MASK_LM_TABLE``); the views use the same table. :func:`load_d2l_state_dict` loads with
d2l-named errors, :func:`to_d2l_state_dict` is ``state_dict()`` (detached).

The pre-1.0 d2l signatures that the book's older text shows are accepted too:
``BERTEncoder(vocab_size, num_hiddens, norm_shape, ffn_num_input, ffn_num_hiddens,
num_heads, num_layers, dropout, max_len=1000, key_size=768, query_size=768,
value_size=768)`` (recognised by ``norm_shape`` being a list) and the same names as
keywords; their input widths must equal ``num_hiddens`` as they must in a working d2l model.
``MaskLM``'s ``num_inputs`` keeps the chapter's default, 768 (see :class:`MaskLM`).

Known difference: a sequence with ``valid_lens == 0`` attends uniformly in d2l and
to all keys by score here; neither output means anything.

``get_tokens_and_segments`` builds d2l's ``<cls> A <sep> B <sep>`` token lists; its
real-BERT counterpart is :meth:`bertkit.BERTTokenizerFast.__call__` with a text pair.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable, Mapping
from typing import NamedTuple

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


# ---------------------------------------------------------------------------- d2l's names

def _squeeze_position_table(t: torch.Tensor) -> torch.Tensor:
    return t.squeeze(0)  # d2l's [1, max_len, H] -> the engine's [max_len, H]


def _unsqueeze_position_table(t: torch.Tensor) -> torch.Tensor:
    return t.unsqueeze(0)


#: (d2l name, bertkit name[, d2l -> bertkit, bertkit -> d2l]). A name covers the parameters
#: below it (``.weight``, ``.bias``); ``{i}`` is a block index. In d2l's state-dict order.
_Rule = tuple
_ENCODER_TABLE: tuple[_Rule, ...] = (
    ("pos_embedding", "bert.embeddings.position_embeddings.weight",
     _squeeze_position_table, _unsqueeze_position_table),
    ("token_embedding", "bert.embeddings.word_embeddings"),
    ("segment_embedding", "bert.embeddings.token_type_embeddings"),
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
    ("mlp.3.bias", "mlp.bias"),  # also mlp.decoder.bias: the same parameter, saved once
)


def _pattern(template: str) -> re.Pattern:
    return re.compile("^" + re.escape(template).replace(r"\{i\}", r"(?P<i>\d+)") + r"(?P<rest>(\..+)?)$")


class _Renamed(NamedTuple):
    name: str
    convert: Callable[[torch.Tensor], torch.Tensor] | None
    order: tuple[int, int, int]  # where d2l's state dict has it: (in a block?, block index, rule index)


def _rename(key: str, table: tuple[_Rule, ...], inverse: bool) -> _Renamed | None:
    """The one mapper: ``key`` renamed by the first matching rule (d2l -> bertkit, or back), or None."""
    for index, (src, dst, *convert) in enumerate(table):
        src, dst = (dst, src) if inverse else (src, dst)
        m = _pattern(src).match(key)
        if m:
            block = m.groupdict().get("i")
            name = dst.replace("{i}", block) if block is not None else dst
            fn = (convert[1] if inverse else convert[0]) if convert else None
            return _Renamed(name + m.group("rest"), fn, (block is not None, int(block or 0), index))
    return None


def _second_names(module: nn.Module) -> dict[str, str]:
    """``{second name: first name}`` of the parameters ``module`` holds under two names (``mlp.decoder.bias``)."""
    first: dict[int, str] = {}
    seconds = {}
    for name, p in module.named_parameters(remove_duplicate=False):
        if id(p) in first:
            seconds[name] = first[id(p)]
        else:
            first[id(p)] = name
    return seconds


def _save_d2l_names(module: nn.Module, state_dict: dict, prefix: str, local_metadata: dict) -> None:
    """State-dict post-hook: ``module``'s entries (the last ones written) under d2l's names, in d2l's order."""
    seconds = _second_names(module)
    entries = [(key, state_dict.pop(key)) for key in [k for k in state_dict if k.startswith(prefix)]]
    renamed = []
    for key, tensor in entries:
        local = key[len(prefix):]
        if local in seconds:
            continue
        r = _rename(local, module.d2l_table, inverse=True)
        renamed.append((r.order, r.name, r.convert(tensor) if r.convert else tensor) if r
                       else ((2, 0, 0), local, tensor))
    for _, name, tensor in sorted(renamed, key=lambda item: item[0]):  # stable: weight stays before bias
        state_dict[prefix + name] = tensor


def _load_d2l_names(module: nn.Module, state_dict: dict, prefix: str, *args) -> None:
    """Load pre-hook: d2l's names in ``state_dict`` become the engine's (engine names pass through)."""
    for key in [k for k in state_dict if k.startswith(prefix)]:
        r = _rename(key[len(prefix):], module.d2l_table, inverse=False)
        if r is not None:
            tensor = state_dict.pop(key)
            state_dict[prefix + r.name] = r.convert(tensor) if r.convert else tensor
    for second, first in _second_names(module).items():
        if prefix + first in state_dict:
            state_dict.setdefault(prefix + second, state_dict[prefix + first])


class _D2LNamed(nn.Module):
    """A module whose state dicts carry d2l 1.0.3's names (``d2l_table``); see the module docstring."""

    d2l_table: tuple[_Rule, ...] = ()

    def _use_d2l_names(self) -> None:
        self.register_state_dict_post_hook(_save_d2l_names)
        self.register_load_state_dict_pre_hook(_load_d2l_names)


class _D2LView:
    """d2l's attribute: a read-only view of the engine module (or parameter) the owner's ``d2l_table`` maps it to."""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, module: nn.Module | None, owner: type | None = None):
        if module is None:
            return self
        r = _rename(self.name, module.d2l_table, inverse=False)
        engine_name = r.name
        try:
            target = module.get_submodule(engine_name)
        except AttributeError:
            target = module.get_parameter(engine_name)
        back = _rename(engine_name, module.d2l_table, inverse=True).convert  # e.g. [L, H] -> [1, L, H]
        return back(target) if back else target

    def __set__(self, module: nn.Module, value) -> None:
        raise AttributeError(f"{self.name} is a read-only view of the engine's "
                             f"{_rename(self.name, module.d2l_table, inverse=False).name}; change that instead.")


# ---------------------------------------------------------------------------- models

class BERTEncoder(_D2LNamed):
    """d2l's BERT encoder: ``forward(tokens [B, L], segments [B, L], valid_lens [B] | [B, L] | None)`` -> ``[B, L, H]``.

    Arguments as d2l 1.0.3: ``(vocab_size, num_hiddens, ffn_num_hiddens, num_heads, num_blks,
    dropout, max_len=1000)`` (and the pre-1.0 form, see the module docstring). The engine
    model is ``self.bert`` (a :class:`~bertkit.BERT` without pooler) and its config ``self.config``;
    ``token_embedding``, ``segment_embedding``, ``pos_embedding`` and ``blks`` are views of it.
    """

    d2l_table = _ENCODER_TABLE
    token_embedding = _D2LView()
    segment_embedding = _D2LView()
    pos_embedding = _D2LView()

    def __init__(self, *args, **kwargs):
        super().__init__()
        self.config = _d2l_config(**_d2l_arguments("BERTEncoder", args, kwargs, _OLD_ENCODER_ORDER))
        self.bert = BERT(self.config, add_pooling_layer=False)
        self.bert.drops_padding = False  # d2l's outputs at every position, padding included
        embeddings = self.bert.embeddings
        embeddings.dropout = nn.Identity()  # d2l drops out inside the blocks only
        embeddings.word_embeddings.padding_idx = None  # d2l's token embedding trains every row
        _torch_default_init_(self.bert)
        self._use_d2l_names()

    __init__.__signature__ = _with_self(_encoder_args)

    @property
    def blks(self) -> nn.ModuleList:
        """d2l's blocks: the engine's layers (``bert.encoder.layer``), with the engine's attribute names."""
        return self.bert.encoder.layer

    def forward(self, tokens: torch.Tensor, segments: torch.Tensor,
                valid_lens: torch.Tensor | None = None) -> torch.Tensor:
        mask = valid_lens_to_mask(valid_lens, tokens.shape[1])
        return self.bert(tokens, attention_mask=mask, token_type_ids=segments)[0]


class _ChapterDefault(int):
    """An int default told apart from the same value passed explicitly."""


class MaskLM(_D2LNamed):
    """d2l's MLM head: ``forward(X [B, L, num_inputs], pred_positions [B, P])`` -> ``[B, P, vocab_size]``.

    ``mlp`` is bertkit's MLM head (dense -> ReLU -> LayerNorm(eps 1e-5) -> decoder, untied).
    ``num_inputs`` is the input width; passed explicitly, the first layer is built for it.
    Left at its default, the chapter's 768, the width is taken from the first input, as d2l
    1.0.3's ``LazyLinear`` does (768 in the chapter's example), so 1.0.3's ``MaskLM(vocab_size,
    num_hiddens)`` works on any encoder; ``None`` asks for that explicitly.
    """

    d2l_table = _MASK_LM_TABLE

    def __init__(self, vocab_size: int, num_hiddens: int, num_inputs: int | None = _ChapterDefault(768)):
        super().__init__()
        head_config = BERTConfig(vocab_size=vocab_size, hidden_size=num_hiddens, num_attention_heads=1,
                                 hidden_act="relu", layer_norm_eps=1e-5, tie_word_embedding=False)
        self.mlp = BERTLMPredictionHead(head_config)
        if isinstance(num_inputs, _ChapterDefault) or num_inputs is None:
            self.mlp.transform.dense = nn.LazyLinear(num_hiddens)
        elif num_inputs != num_hiddens:
            self.mlp.transform.dense = nn.Linear(num_inputs, num_hiddens)
        _torch_default_init_(self.mlp)  # the decoder bias starts like a Linear's, as in d2l
        self._use_d2l_names()

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

_MODULES = (BERTEncoder, MaskLM, NextSentencePred, BERTModel)


def _check_module(module: nn.Module) -> None:
    if not isinstance(module, _MODULES):
        raise TypeError(f"module must be a bertkit.compat.d2l BERTEncoder, MaskLM, NextSentencePred or BERTModel, "
                        f"got {type(module).__name__}.")


def load_d2l_state_dict(module: nn.Module, d2l_state_dict: Mapping[str, torch.Tensor] | nn.Module) -> nn.Module:
    """Copy a real d2l module's weights (its ``state_dict()``, or the module) into ``module``; returns it.

    ``module`` is this module's ``BERTEncoder``, ``MaskLM``, ``NextSentencePred`` or
    ``BERTModel``, built with the d2l model's sizes. ``module.load_state_dict`` takes the
    same dict; this adds errors in d2l's names: ``ValueError`` naming unknown or missing
    keys, mismatched shapes, or d2l ``LazyLinear`` weights not yet materialised; ``TypeError``
    for another kind of module.
    """
    _check_module(module)
    if isinstance(d2l_state_dict, nn.Module):
        d2l_state_dict = d2l_state_dict.state_dict()
    ours = module.state_dict(keep_vars=True)
    unknown = sorted(set(d2l_state_dict) - set(ours))
    if unknown:
        raise ValueError(f"load_d2l_state_dict: keys not in d2l's {type(module).__name__} or not matching this "
                         f"model's sizes: {unknown}.")
    lazy = sorted(k for k, t in d2l_state_dict.items() if isinstance(t, nn.parameter.UninitializedParameter))
    if lazy:
        raise ValueError(f"load_d2l_state_dict: {lazy} are uninitialised LazyLinear weights; run one "
                         "forward pass of the d2l model before copying its weights.")
    missing = sorted(set(ours) - set(d2l_state_dict))
    if missing:
        raise ValueError(f"load_d2l_state_dict: the d2l state dict lacks {missing}.")
    mismatched = [f"{name}: {tuple(d2l_state_dict[name].shape)} vs {tuple(ours[name].shape)}" for name in ours
                  if not isinstance(ours[name], nn.parameter.UninitializedParameter)
                  and d2l_state_dict[name].shape != ours[name].shape]
    if mismatched:
        raise ValueError("load_d2l_state_dict: shapes differ, d2l's vs ours (was the d2l model built with other "
                         "sizes?): " + "; ".join(mismatched))
    module.load_state_dict(d2l_state_dict, strict=True)
    return module


def to_d2l_state_dict(module: nn.Module) -> dict[str, torch.Tensor]:
    """``module``'s weights under d2l 1.0.3's names and shapes (its ``state_dict()``), for d2l's ``load_state_dict``."""
    _check_module(module)
    return dict(module.state_dict())
