"""Name conversion tables as data, with one mapper and its inverse.

``TF_TABLE`` maps Google's TensorFlow variable names to HF/bertkit parameter names.
Each row is ``(tf_prefix, hf_prefix, kind)``; ``{i}`` stands for a layer index. The kind
says which suffixes the row covers and whether the tensor is transposed (TF dense
kernels are ``[in, out]``; ``output_weights`` are already ``[out, in]``).

``HF_FAMILY_TABLES`` maps the HF checkpoint names of another encoder family (RoBERTa's
``roberta.*``, ``lm_head.*``) to bertkit's, which are BERT's HF names whatever the family (the
engine is one): rows ``(hf_prefix, bertkit_prefix)``, the first matching row renames a key. A row
ending in ``.`` renames a prefix, another a whole name; ``{i}`` in a row stands for a layer index.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

import numpy as np

#: kind -> ((tf suffix, hf suffix, transpose), ...)
KINDS: dict[str, tuple[tuple[str, str, bool], ...]] = {
    "dense": (("kernel", "weight", True), ("bias", "bias", False)),
    "layernorm": (("gamma", "weight", False), ("beta", "bias", False)),
    "embedding": (("", "weight", False),),
    "output": (("output_weights", "weight", False), ("output_bias", "bias", False)),
    "output_bias": (("output_bias", "bias", False),),
}

_LAYER_TF = "bert/encoder/layer_{i}"
_LAYER_HF = "bert.encoder.layer.{i}"

TF_TABLE: tuple[tuple[str, str, str], ...] = (
    ("bert/embeddings/word_embeddings", "bert.embeddings.word_embeddings", "embedding"),
    ("bert/embeddings/token_type_embeddings", "bert.embeddings.token_type_embeddings", "embedding"),
    ("bert/embeddings/position_embeddings", "bert.embeddings.position_embeddings", "embedding"),
    ("bert/embeddings/LayerNorm", "bert.embeddings.LayerNorm", "layernorm"),
    (f"{_LAYER_TF}/attention/self/query", f"{_LAYER_HF}.attention.self.query", "dense"),
    (f"{_LAYER_TF}/attention/self/key", f"{_LAYER_HF}.attention.self.key", "dense"),
    (f"{_LAYER_TF}/attention/self/value", f"{_LAYER_HF}.attention.self.value", "dense"),
    (f"{_LAYER_TF}/attention/output/dense", f"{_LAYER_HF}.attention.output.dense", "dense"),
    (f"{_LAYER_TF}/attention/output/LayerNorm", f"{_LAYER_HF}.attention.output.LayerNorm", "layernorm"),
    (f"{_LAYER_TF}/intermediate/dense", f"{_LAYER_HF}.intermediate.dense", "dense"),
    (f"{_LAYER_TF}/output/dense", f"{_LAYER_HF}.output.dense", "dense"),
    (f"{_LAYER_TF}/output/LayerNorm", f"{_LAYER_HF}.output.LayerNorm", "layernorm"),
    ("bert/pooler/dense", "bert.pooler.dense", "dense"),
    ("cls/predictions/transform/dense", "cls.predictions.transform.dense", "dense"),
    ("cls/predictions/transform/LayerNorm", "cls.predictions.transform.LayerNorm", "layernorm"),
    ("cls/predictions", "cls.predictions", "output_bias"),
    ("cls/seq_relationship", "cls.seq_relationship", "output"),
    ("cls/squad", "qa_outputs", "output"),  # run_squad.py
    ("", "classifier", "output"),  # run_classifier.py: top-level output_weights / output_bias
)

#: TF variables that are not model weights: optimizer slots, step counters, loss scaling.
TF_SKIP = re.compile(r"(^|/)(adam_m|adam_v|global_step|beta1_power|beta2_power|bad_steps|good_steps|loss_scale"
                     r"|current_loss_scale)$|/Adam(_1)?$")


#: RoBERTa / XLM-RoBERTa / CamemBERT (HF's ``Roberta*`` classes) <-> bertkit. The backbone is BERT's under
#: another prefix; the MLM head is the same modules under other names. ``classifier.dense`` /
#: ``classifier.out_proj`` (RoBERTa's sentence classifier), ``classifier`` and ``qa_outputs`` are the same on
#: both sides, and so is a bare backbone's (``RobertaModel``'s ``embeddings.*``, ``encoder.*``, ``pooler.*``).
ROBERTA_TABLE: tuple[tuple[str, str], ...] = (
    ("roberta.", "bert."),
    ("lm_head.dense.", "cls.predictions.transform.dense."),
    ("lm_head.layer_norm.", "cls.predictions.transform.LayerNorm."),
    ("lm_head.decoder.", "cls.predictions.decoder."),
    ("lm_head.bias", "cls.predictions.bias"),
)

#: MPNet's attention module names inside ``encoder.layer.{i}.`` -> BERT's (the same math: q/k/v/o projections,
#: the attention block's LayerNorm); its feed-forward names are BERT's.
_MPNET_ATTENTION = (("attention.attn.q.", "attention.self.query."), ("attention.attn.k.", "attention.self.key."),
                    ("attention.attn.v.", "attention.self.value."), ("attention.attn.o.", "attention.output.dense."),
                    ("attention.LayerNorm.", "attention.output.LayerNorm."))

def _backbone_rows(hf_prefix: str, rows: tuple[tuple[str, str], ...]) -> tuple[tuple[str, str], ...]:
    """``rows`` (backbone names, HF's -> bertkit's) under ``hf_prefix`` / ``bert.`` in a task model, then bare (HF's
    ``XModel`` checkpoints name the backbone without prefix, as bertkit's ``BERT`` does)."""
    return tuple((hf_prefix + a, "bert." + b) for a, b in rows) + rows


_DISTILBERT_LAYER = "transformer.layer.{i}."
_BERT_LAYER = "encoder.layer.{i}."

#: DistilBERT (HF's ``DistilBert*``) <-> bertkit: BERT's layer under other names (``q_lin``, ``sa_layer_norm``,
#: ``ffn.lin1``...); ``pre_classifier`` (sequence classification, multiple choice) is BERT's pooler; the MLM head
#: is ``vocab_transform``, ``vocab_layer_norm``, ``vocab_projector`` (whose bias is the head's bias).
#: ``classifier`` and ``qa_outputs`` are the same on both sides.
DISTILBERT_TABLE: tuple[tuple[str, str], ...] = (
    *_backbone_rows("distilbert.", tuple((_DISTILBERT_LAYER + a, _BERT_LAYER + b) for a, b in (
        ("attention.q_lin.", "attention.self.query."),
        ("attention.k_lin.", "attention.self.key."),
        ("attention.v_lin.", "attention.self.value."),
        ("attention.out_lin.", "attention.output.dense."),
        ("sa_layer_norm.", "attention.output.LayerNorm."),
        ("ffn.lin1.", "intermediate.dense."),
        ("ffn.lin2.", "output.dense."),
        ("output_layer_norm.", "output.LayerNorm."),
    ))),
    ("pre_classifier.", "bert.pooler.dense."),  # before the backbone's prefix, which would take it when saving
    ("distilbert.", "bert."),
    ("vocab_transform.", "cls.predictions.transform.dense."),
    ("vocab_layer_norm.", "cls.predictions.transform.LayerNorm."),
    ("vocab_projector.bias", "cls.predictions.bias"),
    ("vocab_projector.", "cls.predictions.decoder."),
)

#: MPNet (HF's ``MPNet*`` classes) <-> bertkit: RoBERTa's names under ``mpnet.`` plus the attention's own, in a
#: task model (``mpnet.encoder...``) and a bare backbone (``encoder...``). ``encoder.relative_attention_bias`` is
#: the same on both sides.
MPNET_TABLE: tuple[tuple[str, str], ...] = (
    *_backbone_rows("mpnet.", tuple((_BERT_LAYER + a, _BERT_LAYER + b) for a, b in _MPNET_ATTENTION)),
    ("mpnet.", "bert."),
    *(row for row in ROBERTA_TABLE if row[0].startswith("lm_head")),  # RoBERTa's MLM head
)

#: ELECTRA (HF's ``Electra*``) <-> bertkit: BERT's backbone under ``electra.`` (with ``embeddings_project``); the
#: generator's MLM head ``generator_predictions`` / ``generator_lm_head`` (whose bias is the head's bias); the
#: multiple-choice ``sequence_summary.summary`` is BERT's pooler. ``discriminator_predictions``,
#: ``classifier`` (``.dense`` / ``.out_proj`` too) and ``qa_outputs`` are the same on both sides.
ELECTRA_TABLE: tuple[tuple[str, str], ...] = (
    ("sequence_summary.summary.", "bert.pooler.dense."),
    ("electra.", "bert."),
    ("generator_predictions.dense.", "cls.predictions.transform.dense."),
    ("generator_predictions.LayerNorm.", "cls.predictions.transform.LayerNorm."),
    ("generator_lm_head.bias", "cls.predictions.bias"),
    ("generator_lm_head.", "cls.predictions.decoder."),
)

#: ModernBERT (HF's ``ModernBert*`` classes) <-> bertkit. The backbone (``model.*``; a bare ``ModernBertModel``'s
#: without the prefix) is renamed to BERT's embeddings and encoder; inside a layer the names are HF's (the
#: ``"modernbert"`` layer variant keeps them). HF's ``head`` (dense, norm) is one name for the transform that the
#: masked LM and every classifier share: read as the MLM head's transform, it fills a classifier's ``head`` when
#: loaded into one (:data:`HF_FAMILY_SHARED_HEADS`); likewise HF's ``classifier`` is a question-answering model's
#: ``qa_outputs``. The later rows of one HF prefix serve writing only (reading takes the first).
MODERNBERT_TABLE: tuple[tuple[str, str], ...] = (
    ("model.embeddings.tok_embeddings.", "bert.embeddings.word_embeddings."),
    ("model.embeddings.norm.", "bert.embeddings.LayerNorm."),
    ("model.layers.", "bert.encoder.layer."),
    ("model.final_norm.", "bert.encoder.final_norm."),
    ("embeddings.tok_embeddings.", "embeddings.word_embeddings."),
    ("embeddings.norm.", "embeddings.LayerNorm."),
    ("layers.", "encoder.layer."),
    ("final_norm.", "encoder.final_norm."),
    ("head.norm.", "cls.predictions.transform.LayerNorm."),
    ("head.", "cls.predictions.transform."),
    ("decoder.bias", "cls.predictions.bias"),
    ("decoder.", "cls.predictions.decoder."),
    ("classifier.", "classifier."),
    ("head.norm.", "head.LayerNorm."),  # writing a classifier's head
    ("head.", "head."),
    ("classifier.", "qa_outputs."),  # writing a question-answering model's
)

#: DeBERTa-v2 (HF's ``DebertaV2*`` classes) <-> bertkit: BERT's backbone under ``deberta.`` with the attention's
#: projections ``query_proj`` / ``key_proj`` / ``value_proj`` named BERT's way (``pos_key_proj`` / ``pos_query_proj``
#: keep their names), the encoder's ``rel_embeddings`` / ``LayerNorm`` in ``encoder.relative`` (the "deberta"
#: variant's context), its ``conv`` in the first layer; the ContextPooler ``pooler.dense`` is BERT's pooler. The
#: masked LM's legacy head (``cls.predictions.*``, HF's default) is BERT's and is written; the ``legacy=False``
#: layout (``lm_predictions.lm_head.*``, decoding with the word embeddings) is read into the same modules and
#: written by :data:`DEBERTA_LM_PREDICTIONS_TABLE`.
_DEBERTA_ATTENTION = tuple((f"attention.self.{name}_proj.", f"attention.self.{name}.") for name in
                           ("query", "key", "value"))
_DEBERTA_BACKBONE = (
    *((_BERT_LAYER + a, _BERT_LAYER + b) for a, b in _DEBERTA_ATTENTION),
    ("encoder.rel_embeddings.", "encoder.relative.rel_embeddings."),
    ("encoder.LayerNorm.", "encoder.relative.LayerNorm."),
    ("encoder.conv.", "encoder.layer.0.conv."),
)
_DEBERTA_HEADS = (
    ("pooler.", "bert.pooler."),  # before the backbone's prefix, which would take it when saving
    ("deberta.", "bert."),
)
DEBERTA_TABLE: tuple[tuple[str, str], ...] = (
    ("cls.predictions.", "cls.predictions."),  # the legacy head: written as such
    *_backbone_rows("deberta.", _DEBERTA_BACKBONE),
    *_DEBERTA_HEADS,
    ("lm_predictions.lm_head.bias", "cls.predictions.bias"),
    ("lm_predictions.lm_head.", "cls.predictions.transform."),
)
#: A ``legacy=False`` DeBERTa-v2 masked LM's names (its head ``lm_predictions.lm_head.*``): writing only
#: (:func:`hf_names_key`).
DEBERTA_LM_PREDICTIONS_TABLE: tuple[tuple[str, str], ...] = (
    ("lm_predictions.lm_head.bias", "cls.predictions.bias"),
    ("lm_predictions.lm_head.", "cls.predictions.transform."),
    *_backbone_rows("deberta.", _DEBERTA_BACKBONE),
    *_DEBERTA_HEADS,
)

#: EuroBERT (HF's ``EuroBert*`` classes) <-> bertkit. The backbone (``model.*``; a bare ``EuroBertModel``'s without
#: the prefix) is renamed to BERT's embeddings and encoder; inside a layer the names are HF's (the ``"llama"`` layer
#: variant keeps them). The sequence classifier's top-level ``dense`` is BERT's pooler (gelu); ``lm_head`` is the
#: masked LM's decoder (no transform) and its bias, present with ``mlp_bias``, the head's bias. ``classifier`` is the
#: same on both sides.
EUROBERT_TABLE: tuple[tuple[str, str], ...] = (
    ("model.embed_tokens.", "bert.embeddings.word_embeddings."),
    ("model.layers.", "bert.encoder.layer."),
    ("model.norm.", "bert.encoder.final_norm."),
    ("embed_tokens.", "embeddings.word_embeddings."),
    ("layers.", "encoder.layer."),
    ("norm.", "encoder.final_norm."),
    ("dense.", "bert.pooler.dense."),
    ("lm_head.bias", "cls.predictions.bias"),
    ("lm_head.", "cls.predictions.decoder."),
)


def _rope_backbone_rows(hf_prefix: str, hf_layers: str, inside: tuple[tuple[str, str], ...] = (),
                        embedding_norm: str = "embeddings.LayerNorm.") -> tuple[tuple[str, str], ...]:
    """A post-LN rotary family's backbone, in a task model (``hf_prefix``) and bare: its layers (``hf_layers``,
    HF's names inside a layer renamed by ``inside`` to the ``"rope"`` variant's), its embeddings' LayerNorm, the
    rest under the prefix."""
    layer = hf_layers + ".{i}."
    rows = (*((layer + a, _BERT_LAYER + b) for a, b in inside), (hf_layers + ".", "encoder.layer."),
            (embedding_norm, "embeddings.LayerNorm."))
    return (*_backbone_rows(hf_prefix, rows), (hf_prefix, "bert."))


#: GTE (HF's ``Gte*``; the checkpoints HF writes keep the original layout, whose layer names the ``"rope"`` variant
#: uses) <-> bertkit: the backbone under ``gte.``; XLM-R's MLM head ``lm_head`` (its LayerNorm ``norm``), whose
#: decoder holds the head's bias (one Linear, no ``lm_head.bias``). ``classifier`` is the same on both sides.
GTE_TABLE: tuple[tuple[str, str], ...] = (
    *_rope_backbone_rows("gte.", "encoder.layer"),
    ("lm_head.dense.", "cls.predictions.transform.dense."),
    ("lm_head.norm.", "cls.predictions.transform.LayerNorm."),
    ("lm_head.decoder.bias", "cls.predictions.bias"),
    ("lm_head.decoder.", "cls.predictions.decoder."),
)

#: NomicBERT (HF's ``NomicBert*``, written in nomic-embed's original layout) <-> bertkit: the backbone under
#: ``nomic_bert.`` (layers ``encoder.layers.{i}``: ``attn.Wqkv``, ``attn.out_proj``, ``norm1``, ``mlp.fc11`` (up),
#: ``mlp.fc12`` (gate), ``mlp.fc2`` (down), ``norm2``; the embeddings' LayerNorm ``emb_ln``); BERT's MLM head but
#: for its transform's LayerNorm, HF-named ``layer_norm``.
NOMIC_BERT_TABLE: tuple[tuple[str, str], ...] = (
    *_rope_backbone_rows("nomic_bert.", "encoder.layers", (
        ("attn.Wqkv.", "attention.qkv_proj."), ("attn.out_proj.", "attention.o_proj."), ("norm1.", "attn_ln."),
        ("mlp.fc11.", "mlp.up_proj."), ("mlp.fc12.", "mlp.gate_proj."), ("mlp.fc2.", "mlp.down_proj."),
        ("norm2.", "mlp_ln.")), embedding_norm="emb_ln."),
    ("cls.predictions.transform.layer_norm.", "cls.predictions.transform.LayerNorm."),
)

#: Jina embeddings v3 (HF's ``JinaEmbeddingsV3*``, the port of jina-embeddings-v3, written in its original layout)
#: <-> bertkit: the backbone under ``roberta.`` (layers ``encoder.layers.{i}``: ``mixer.Wqkv``, ``mixer.out_proj``,
#: ``norm1``, ``mlp.fc1`` / ``mlp.fc2`` (the ``"rope"`` variant's plain MLP), ``norm2``; the embeddings' LayerNorm
#: ``emb_ln``); XLM-R's heads (``lm_head``, ``classifier.dense`` / ``.out_proj``). The released checkpoint's LoRA
#: tensors are merged (or dropped) first: :mod:`bertkit.weights.task_adapters`.
JINA_TABLE: tuple[tuple[str, str], ...] = (
    *_rope_backbone_rows("roberta.", "encoder.layers", (
        ("mixer.Wqkv.", "attention.qkv_proj."), ("mixer.out_proj.", "attention.o_proj."), ("norm1.", "attn_ln."),
        ("norm2.", "mlp_ln.")), embedding_norm="emb_ln."),
    *(row for row in ROBERTA_TABLE if row[0].startswith("lm_head")),  # RoBERTa's MLM head
)

#: ``BERTConfig.family`` -> its HF names table (BERT's HF names are bertkit's: no table).
HF_FAMILY_TABLES: dict[str, tuple[tuple[str, str], ...]] = {
    "bert": (), "roberta": ROBERTA_TABLE, "mpnet": MPNET_TABLE, "distilbert": DISTILBERT_TABLE,
    "electra": ELECTRA_TABLE, "modernbert": MODERNBERT_TABLE,
    "deberta-v2": DEBERTA_TABLE, "deberta-v2/lm_predictions": DEBERTA_LM_PREDICTIONS_TABLE,
    "eurobert": EUROBERT_TABLE,
    "gte": GTE_TABLE, "nomic_bert": NOMIC_BERT_TABLE,
    "jina_embeddings_v3": JINA_TABLE,
}


def hf_names_key(config) -> str:
    """The :data:`HF_FAMILY_TABLES` key that writes ``config``'s checkpoints: its family, or a layout of it that
    the config selects (DeBERTa-v2's ``legacy=False`` masked-LM head)."""
    if config.family == "deberta-v2" and not config.legacy:
        return "deberta-v2/lm_predictions"
    return config.family

#: ``BERTConfig.family`` -> ``(checkpoint prefix, model prefix)`` pairs (bertkit's names): where a model has
#: parameters under the model prefix and the checkpoint none, the checkpoint's under the other prefix fill them.
#: HF gives one name to heads that bertkit names apart (ModernBERT's ``head``: the MLM's transform and the
#: classifiers' ``head``), so that loading one task's checkpoint into another task's model keeps it, as in HF.
HF_FAMILY_SHARED_HEADS: dict[str, tuple[tuple[str, str], ...]] = {
    "modernbert": (("cls.predictions.transform.", "head."), ("classifier.", "qa_outputs.")),
}


@dataclass(frozen=True)
class Rule:
    source: re.Pattern
    target: str  # with {i}
    transpose: bool


def _join(prefix: str, suffix: str, sep: str) -> str:
    return sep.join(part for part in (prefix, suffix) if part)


def _compile(template: str, whole: bool = True) -> re.Pattern:
    """``template`` as a pattern, ``{i}`` matching a layer index; ``whole=False`` matches what begins with it."""
    return re.compile("^" + re.escape(template).replace(re.escape("{i}"), r"(?P<i>\d+)") + ("$" if whole else ""))


def _rules(table, inverse: bool) -> list[Rule]:
    rules = []
    for tf_prefix, hf_prefix, kind in table:
        for tf_suffix, hf_suffix, transpose in KINDS[kind]:
            tf_name, hf_name = _join(tf_prefix, tf_suffix, "/"), _join(hf_prefix, hf_suffix, ".")
            source, target = (hf_name, tf_name) if inverse else (tf_name, hf_name)
            rules.append(Rule(_compile(source), target, transpose))
    return rules


_TF_TO_HF = _rules(TF_TABLE, inverse=False)
_HF_TO_TF = _rules(TF_TABLE, inverse=True)


def map_names(tensors: dict[str, np.ndarray], rules: list[Rule], skip: re.Pattern | None = None,
              what: str = "checkpoint") -> dict[str, np.ndarray]:
    """Rename (and transpose where the rule says) every tensor; an unmatched name is a ValueError."""
    out, unknown = {}, []
    for name, value in tensors.items():
        if skip is not None and skip.search(name):
            continue
        for rule in rules:
            m = rule.source.match(name)
            if m:
                out[rule.target.format(**m.groupdict())] = value.T if rule.transpose else value
                break
        else:
            unknown.append(name)
    if unknown:
        shown = ", ".join(sorted(unknown)[:8]) + (f" ... ({len(unknown)} in all)" if len(unknown) > 8 else "")
        raise ValueError(f"the {what} holds variables bertkit does not know how to map: {shown}. Is it a BERT "
                         "checkpoint (Google's variable names)?")
    return out


def tf_to_hf(tensors: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Google TF variable names -> HF names (kernels transposed, optimizer slots dropped)."""
    return map_names(tensors, _TF_TO_HF, TF_SKIP, "TensorFlow checkpoint")


def hf_to_tf(tensors: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """HF names -> Google TF variable names, the inverse of :func:`tf_to_hf`.

    ``cls.predictions.decoder.*`` (tied to the embeddings / the bias) has no TF variable and
    must be dropped by the caller first.
    """
    return map_names(tensors, _HF_TO_TF, None, "state dict")


@functools.cache
def _row_pattern(source: str) -> re.Pattern:
    """A family table row's source as a pattern: a prefix (ending in ``.``) or a whole name."""
    return _compile(source, whole=not source.endswith("."))


def _rename_prefixes(names: dict, table: tuple[tuple[str, str], ...]) -> dict:
    out = {}
    for name, value in names.items():
        for source, target in table:
            m = _row_pattern(source).match(name)
            if m:
                name = target.format(**m.groupdict()) + name[m.end():]
                break
        if name in out:
            raise ValueError(f"two tensors of the checkpoint map to {name!r}; it mixes two families' names.")
        out[name] = value
    return out


def hf_family_to_bertkit(tensors: dict, family: str) -> dict:
    """A ``family`` checkpoint's HF names -> bertkit's (:data:`HF_FAMILY_TABLES`); other names are kept."""
    return _rename_prefixes(tensors, HF_FAMILY_TABLES[family])


def bertkit_to_hf_family(tensors: dict, family: str) -> dict:
    """bertkit's names -> the HF names of ``family``'s checkpoints, the inverse of :func:`hf_family_to_bertkit`."""
    return _rename_prefixes(tensors, tuple((b, a) for a, b in HF_FAMILY_TABLES[family]))


def separate_decoder_bias(family: str) -> bool:
    """Whether ``family``'s HF MLM head keeps the decoder's bias apart from the head's (BERT's
    ``cls.predictions.decoder.bias``, RoBERTa's ``lm_head.decoder.bias``; HF reads it when the embeddings are
    untied), rather than one Linear's bias under one name (DistilBERT's ``vocab_projector``, ELECTRA's
    ``generator_lm_head``)."""
    names = ("cls.predictions.bias", "cls.predictions.decoder.bias")
    return len({next(iter(bertkit_to_hf_family({name: None}, family))) for name in names}) == 2
