"""Model sizes as data: Google's BERT table (L layers, H hidden, A heads, intermediate 4H), and beside
each size the recipe that pretrains it from raw text (:data:`RECIPES`).

``tiny``..``medium`` are the sizes of Google's 24 small BERTs ("Well-Read Students
Learn Better"); ``base`` and ``large`` are the original BERT paper's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from bertkit.config import FAMILIES, BERTConfig

#: name -> (num_hidden_layers, hidden_size, num_attention_heads)
SIZES: dict[str, tuple[int, int, int]] = {
    "tiny": (2, 128, 2),
    "mini": (4, 256, 4),
    "small": (4, 512, 8),
    "medium": (8, 512, 8),
    "base": (12, 768, 12),
    "large": (24, 1024, 16),
}


def preset_fields(size: str) -> dict[str, int]:
    """The BERTConfig fields that define ``size``; raises ``ValueError`` for an unknown size."""
    try:
        layers, hidden, heads = SIZES[size]
    except KeyError:
        raise ValueError(f"Unknown model size {size!r}; choose one of {list(SIZES)}.") from None
    return {"num_hidden_layers": layers, "hidden_size": hidden, "num_attention_heads": heads,
            "intermediate_size": 4 * hidden}


def preset_config(size: str, **overrides: Any) -> BERTConfig:
    """``BERTConfig`` of a preset size with ``overrides`` applied (validated)."""
    return BERTConfig(**{**preset_fields(size), **overrides})


#: HF model_type -> the BERTConfig fields that make the family's released base checkpoints (roberta-base,
#: xlm-roberta-base, camembert-base, mpnet-base: 512 tokens, positions from pad + 1 = 2, one token type (none for
#: MPNet); distilbert-base-uncased: 6 layers; google/electra-base-discriminator: embedding_size 768) beside the
#: base size.
FAMILY_PRESETS: dict[str, dict[str, Any]] = {
    "roberta": dict(family="roberta", vocab_size=50265, max_position_embeddings=514, type_vocab_size=1,
                    layer_norm_eps=1e-5, pad_token_id=1),
    "xlm-roberta": dict(family="roberta", model_type="xlm-roberta", vocab_size=250002, max_position_embeddings=514,
                        type_vocab_size=1, layer_norm_eps=1e-5, pad_token_id=1),
    "camembert": dict(family="roberta", model_type="camembert", vocab_size=32005, max_position_embeddings=514,
                      type_vocab_size=1, layer_norm_eps=1e-5, pad_token_id=1, cls_token_id=5, sep_token_id=6),
    # microsoft/mpnet-base and sentence-transformers/all-mpnet-base-v2: <mask> is 30526, the last id
    "mpnet": dict(family="mpnet", vocab_size=30527, max_position_embeddings=514, layer_norm_eps=1e-5, pad_token_id=1,
                  relative_attention_num_buckets=32),
    "distilbert": dict(family="distilbert", num_hidden_layers=6, pooler_dropout=0.2, qa_dropout=0.1),
    "electra": dict(family="electra", embedding_size=768),
    "modernbert": dict(family="modernbert", **FAMILIES["modernbert"].hf_defaults),
    # microsoft/deberta-v3-base (mdeberta-v3-base: vocab_size=251000): relative attention in 256 log buckets,
    # shared position projections, no absolute positions nor token types
    "deberta-v2": dict(family="deberta-v2", vocab_size=128100, max_position_embeddings=512, type_vocab_size=0,
                       layer_norm_eps=1e-7, relative_attention=True, position_buckets=256, norm_rel_ebd="layer_norm",
                       share_att_key=True, pos_att_type=["p2c", "c2p"], position_biased_input=False,
                       pooler_hidden_act="gelu"),
    "eurobert": dict(family="eurobert", **FAMILIES["eurobert"].hf_defaults),
    "gte": dict(family="gte", **FAMILIES["gte"].hf_defaults),
    "nomic_bert": dict(family="nomic_bert", **FAMILIES["nomic_bert"].hf_defaults),
    "jina_embeddings_v3": dict(family="jina_embeddings_v3", **FAMILIES["jina_embeddings_v3"].hf_defaults),
}


def family_config(model_type: str, **overrides: Any) -> BERTConfig:
    """The config of ``model_type``'s base checkpoint (:data:`FAMILY_PRESETS`) with ``overrides`` applied;
    e.g. ``family_config("roberta", **preset_fields("large"))``. ``ValueError`` for an unknown model type."""
    try:
        fields = FAMILY_PRESETS[model_type]
    except KeyError:
        raise ValueError(f"Unknown model type {model_type!r}; choose one of {list(FAMILY_PRESETS)}.") from None
    return BERTConfig(**{**fields, **overrides})


def RoBERTaConfig(**overrides: Any) -> BERTConfig:  # lucid-style name of a config factory
    """A ``BERTConfig(family="roberta")`` with roberta-base's values; ``overrides`` are BERTConfig fields."""
    return family_config("roberta", **overrides)


def XLMRoBERTaConfig(**overrides: Any) -> BERTConfig:
    """A ``BERTConfig(family="roberta", model_type="xlm-roberta")`` with xlm-roberta-base's values."""
    return family_config("xlm-roberta", **overrides)


def CamemBERTConfig(**overrides: Any) -> BERTConfig:
    """A ``BERTConfig(family="roberta", model_type="camembert")`` with camembert-base's values (``<s>`` 5,
    ``</s>`` 6)."""
    return family_config("camembert", **overrides)


def MPNetConfig(**overrides: Any) -> BERTConfig:
    """A ``BERTConfig(family="mpnet")`` with microsoft/mpnet-base's values (all-mpnet-base-v2's too): no token
    types, 32 relative-position buckets, pad 1 (the only one: HF's MPNet pads with id 1 whatever its config
    says), ``<s>`` 0, ``</s>`` 2, ``<unk>`` 3, ``<mask>`` 30526."""
    return family_config("mpnet", **overrides)


def DistilBERTConfig(**overrides: Any) -> BERTConfig:
    """A ``BERTConfig(family="distilbert")`` with distilbert-base-uncased's values (6 layers of BERT-base's size,
    ``seq_classif_dropout`` 0.2 as ``pooler_dropout``, ``qa_dropout`` 0.1); ``overrides`` are BERTConfig fields,
    e.g. ``sinusoidal_pos_embds=True``."""
    return family_config("distilbert", **overrides)


def ELECTRAConfig(**overrides: Any) -> BERTConfig:
    """A ``BERTConfig(family="electra")`` with google/electra-base-discriminator's values (BERT-base with
    ``embedding_size`` 768). The small discriminator: ``ELECTRAConfig(embedding_size=128, hidden_size=256,
    num_attention_heads=4, intermediate_size=1024)``; a generator is a smaller ``hidden_size`` over the same
    ``embedding_size``."""
    return family_config("electra", **overrides)


def ModernBERTConfig(**overrides: Any) -> BERTConfig:
    """A ``BERTConfig(family="modernbert")`` with HF's ``ModernBertConfig`` defaults (ModernBERT-base: 22 layers,
    intermediate 1152, no biases, global attention every 3rd layer, a 128-token window elsewhere, 8192 positions,
    vocabulary 50368 with pad 50283, [CLS] 50281, [SEP] 50282, [MASK] 50284); ``overrides`` are BERTConfig fields.
    """
    return family_config("modernbert", **overrides)


def DeBERTaV2Config(**overrides: Any) -> BERTConfig:
    """A ``BERTConfig(family="deberta-v2")`` with microsoft/deberta-v3-base's values (BERT-base sizes, vocabulary
    128100 with [PAD] 0, [CLS] 1, [SEP] 2, [UNK] 3, [MASK] 128000, relative attention (``pos_att_type`` p2c and c2p,
    ``share_att_key``) over 256 log buckets of 512 positions, the relative embeddings LayerNorm-ed, no absolute
    positions nor token types, LayerNorm eps 1e-7); ``overrides`` are BERTConfig fields (mDeBERTa-v3:
    ``vocab_size=251000``; v2-style: ``position_buckets=-1, share_att_key=False, conv_kernel_size=3``...)."""
    return family_config("deberta-v2", **overrides)
def EuroBERTConfig(**overrides: Any) -> BERTConfig:
    """A ``BERTConfig(family="eurobert")`` with HF's ``EuroBertConfig`` defaults (EuroBERT-210m's shape: 12 layers of
    768, silu, RMSNorm eps 1e-5, no biases, untied ``lm_head``, ``classifier_pooling`` ``"late"``, 8192 positions,
    vocabulary 128256 with ``<|begin_of_text|>`` 128000, ``<|end_of_text|>`` 128001 (also the padding),
    ``<|mask|>`` 128002); ``overrides`` are BERTConfig fields (``num_key_value_heads``, ``rope_theta``: the released
    checkpoints use 250000)."""
    return family_config("eurobert", **overrides)
def GTEConfig(**overrides: Any) -> BERTConfig:
    """A ``BERTConfig(family="gte")`` with HF's ``GteConfig`` defaults (gte-multilingual-base: BERT-base's size,
    vocabulary 250048 with pad 1, one token type, 8192 positions, rope theta 160000, no attention dropout); for
    gte-base-en-v1.5 ``GTEConfig(vocab_size=30528, type_vocab_size=0, pad_token_id=0, rope_scaling=...)``.
    ``overrides`` are BERTConfig fields."""
    return family_config("gte", **overrides)


def NomicBERTConfig(**overrides: Any) -> BERTConfig:
    """A ``BERTConfig(family="nomic_bert")`` with HF's ``NomicBertConfig`` defaults (nomic-embed-text-v1.5:
    BERT-base's size, vocabulary 30528, SwiGLU, no biases in attention or MLP, no dropout, 2048 positions, rope
    theta 1000); ``overrides`` are BERTConfig fields."""
    return family_config("nomic_bert", **overrides)


def JinaEmbeddingsV3Config(**overrides: Any) -> BERTConfig:
    """A ``BERTConfig(family="jina_embeddings_v3")`` with HF's ``JinaEmbeddingsV3Config`` defaults
    (jina-embeddings-v3: XLM-R large's 24 layers of 1024 with rotary positions of theta 20000, 8194 positions, one
    token type, vocabulary 250002 with ``<s>`` 0, pad 1, ``</s>`` 2); ``overrides`` are BERTConfig fields. Its task
    adapters are not part of the config: they are merged into the weights at load (``from_pretrained(task=...)``).
    """
    return family_config("jina_embeddings_v3", **overrides)


@dataclass(frozen=True)
class SizeRecipe:
    """How to pretrain one model size from raw text on modest hardware: the CLI's defaults for that size.

    ``next_sentence_prediction=False`` trains MLM alone on contiguous text (as RoBERTa does);
    ``tuned`` says whether the numbers were tuned and measured (see ``note``) or are a
    starting point scaled from the published recipes (Google's BERT and small-BERT releases).
    """

    learning_rate: float
    batch_size: int
    max_seq_length: int
    masked_lm_prob: float
    max_steps: int
    warmup_ratio: float
    vocab_size: int
    next_sentence_prediction: bool = True
    tuned: bool = False
    note: str = ""


#: size -> pretraining recipe. ``tiny`` was tuned on the bundled Austen corpus and confirmed on a book the
#: project never trained on (README "Pretraining"); the larger sizes scale it towards Google's settings
#: (lr 1e-4, batch 256 x 128 for BERT-base) and are untuned starting points.
#: the old name of :class:`SizeRecipe` (a recipe of the run is :class:`bertkit.training.run.Recipe`)
Recipe = SizeRecipe

RECIPES: dict[str, SizeRecipe] = {
    "tiny": SizeRecipe(learning_rate=2e-3, batch_size=32, max_seq_length=64, masked_lm_prob=0.3, max_steps=3500,
                   warmup_ratio=0.05, vocab_size=4000, next_sentence_prediction=False, tuned=True,
                   note="2 CPU cores, ~5 min: many small steps leave the unigram plateau sooner than few large ones; "
                        "on a 1 MB book NSP memorises its pairs and stalls MLM, so it is off"),
    "mini": SizeRecipe(learning_rate=1e-3, batch_size=64, max_seq_length=128, masked_lm_prob=0.2, max_steps=10_000,
                   warmup_ratio=0.05, vocab_size=8000),
    "small": SizeRecipe(learning_rate=5e-4, batch_size=128, max_seq_length=128, masked_lm_prob=0.15, max_steps=20_000,
                    warmup_ratio=0.05, vocab_size=16_000),
    "medium": SizeRecipe(learning_rate=3e-4, batch_size=128, max_seq_length=128, masked_lm_prob=0.15, max_steps=50_000,
                     warmup_ratio=0.02, vocab_size=30_522),
    "base": SizeRecipe(learning_rate=1e-4, batch_size=256, max_seq_length=128, masked_lm_prob=0.15, max_steps=100_000,
                   warmup_ratio=0.01, vocab_size=30_522),
    "large": SizeRecipe(learning_rate=1e-4, batch_size=256, max_seq_length=128, masked_lm_prob=0.15, max_steps=100_000,
                    warmup_ratio=0.01, vocab_size=30_522),
}


def recipe_for(size_or_hidden: str | int) -> SizeRecipe:
    """The recipe of a size name, or for a custom config the largest size whose hidden size is at most
    ``size_or_hidden`` (``tiny``'s below that)."""
    if isinstance(size_or_hidden, str):
        preset_fields(size_or_hidden)  # ValueError naming the sizes
        return RECIPES[size_or_hidden]
    fitting = [name for name, (_, hidden, _) in SIZES.items() if hidden <= size_or_hidden]
    return RECIPES[fitting[-1] if fitting else "tiny"]
