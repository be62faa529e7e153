"""EuroBERT as a family of the one engine (``BERTConfig(family="eurobert")``, layer variant ``"llama"``).

Parity with HF transformers' ``EuroBert*`` classes (a test-only dependency; no network): random weights are written by
one library's ``save_pretrained`` and read by the other's ``from_pretrained``; outputs, losses and gradients must
agree at every real position of a padded batch (full, right- and left-padded rows), with eager and SDPA attention,
on the fast and the plain engine path. The heads: masked LM (untied; tied with a bias), sequence classification
with each ``classifier_pooling`` (bos, mean, late; regression and multi-label), token classification. The sizes are
odd and the attention grouped (6 query heads, 2 key/value heads); RMSNorm weights are random around 1 where a test
must see the attention work (:func:`strong`), since the shared randomisation leaves them near 0.
"""

from __future__ import annotations

import json
import re

import pytest
import torch

pytest.importorskip("transformers")

import transformers
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, processors, trainers

import bertkit
from bertkit.config import BERTConfig
from bertkit.families import FAMILIES
from bertkit.modeling import fast
from bertkit.modeling.counting import count_parameters
from bertkit.modeling.norm import RMSNorm
from bertkit.weights.tables import bertkit_to_hf_family, hf_family_to_bertkit
from family_dirs import austen_lines
from family_parity import (
    IMPLEMENTATIONS,
    TOL,
    Case,
    FamilySetup,
    assert_pairs_close,
    check_fast_and_plain_paths_agree,
    check_hf_checkpoint,
    check_our_checkpoint,
    hf_from_pretrained,
    inputs_for,
    ours_and_hf_outputs,
    padded_ids,
    token_labels,
)
from tokenizer_json_helpers import HELDOUT, assert_same, plain

transformers.logging.set_verbosity_error()
transformers.utils.logging.disable_progress_bar()

PAD, BOS, EOS, MASK = 0, 1, 2, 3
#: odd sizes: hidden 36 in 6 heads of 6 over 2 key/value heads, inner 26, vocab 99; a rope base of its own
SHAPE = dict(vocab_size=99, hidden_size=36, num_hidden_layers=2, num_attention_heads=6, num_key_value_heads=2,
             intermediate_size=26, max_position_embeddings=64)
OURS = {**FAMILIES["eurobert"].hf_defaults, **SHAPE, "rope_theta": 500.0, "pad_token_id": PAD,
        "cls_token_id": BOS, "sep_token_id": EOS, "mask_token_id": MASK}
HF = dict(SHAPE, rope_parameters={"rope_theta": 500.0, "rope_type": "default"}, pad_token_id=PAD,
          bos_token_id=BOS, eos_token_id=EOS, mask_token_id=MASK)
EUROBERT = FamilySetup("eurobert", transformers.EuroBertConfig, ours=OURS, hf=HF, pad=PAD,
                       grads_include=("self_attn.k_proj.weight", "model.norm.weight"))


def pooling(name: str, **fields) -> dict:
    """A head's fields on both sides: our ``classifier_pooling`` (``"cls"`` is HF's ``"bos"``)."""
    return dict(config=dict(fields, classifier_pooling=name),
                hf_config=dict(fields, classifier_pooling={"cls": "bos"}.get(name, name)))


def seq_labels(family, inputs):
    return dict(labels=torch.tensor([2, 0, 1]))


CASES = {c.id: c for c in (
    Case("model", bertkit.BERT, "EuroBertModel", outputs=("last_hidden_state",), token_level=(True,)),
    Case("masked_lm", bertkit.BERTForMaskedLM, "EuroBertForMaskedLM", token_level=(True,),
         labels=lambda f, x: dict(labels=token_labels(x, f.vocab_size))),
    Case("masked_lm_tied_biased", bertkit.BERTForMaskedLM, "EuroBertForMaskedLM", token_level=(True,),
         config=dict(tie_word_embedding=True, mlp_bias=True, attention_bias=True),
         hf_config=dict(tie_word_embeddings=True, mlp_bias=True, attention_bias=True),
         labels=lambda f, x: dict(labels=token_labels(x, f.vocab_size))),
    # bos reads position 0, a padding token in the left-padded row, as HF does (that batch stays padded)
    Case("seq_cls_bos", bertkit.BERTForSequenceClassification, "EuroBertForSequenceClassification",
         **pooling("cls", num_labels=3), labels=seq_labels),
    Case("seq_cls_mean", bertkit.BERTForSequenceClassification, "EuroBertForSequenceClassification",
         **pooling("mean", num_labels=3), labels=seq_labels),
    Case("seq_cls_late", bertkit.BERTForSequenceClassification, "EuroBertForSequenceClassification",
         **pooling("late", num_labels=3), labels=seq_labels),
    Case("seq_cls_late_regression", bertkit.BERTForSequenceClassification, "EuroBertForSequenceClassification",
         **pooling("late", num_labels=1), labels=lambda f, x: dict(labels=torch.tensor([0.5, -1.0, 2.0]))),
    Case("seq_cls_mean_multi_label", bertkit.BERTForSequenceClassification, "EuroBertForSequenceClassification",
         **pooling("mean", num_labels=3, problem_type="multi_label_classification"),
         labels=lambda f, x: dict(labels=torch.tensor([[1.0, 0.0, 1.0], [0.0, 0.0, 1.0], [1.0, 1.0, 0.0]]))),
    Case("token_cls", bertkit.BERTForTokenClassification, "EuroBertForTokenClassification",
         config=dict(num_labels=5), hf_config=dict(num_labels=5), token_level=(True,),
         labels=lambda f, x: dict(labels=token_labels(x, 5))),
)}


def strong(model: torch.nn.Module, seed: int = 0) -> torch.nn.Module:
    """Random weights of std 0.3, norm weights around 1 (HF's names and ours): attention far from uniform, so the
    rotary angles and the key/value groups decide the outputs."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=g) * 0.3
            p.copy_(1.0 + noise if re.search(r"norm\.weight$", name) else noise)
    return model


# ---------------------------------------------------------------------------- HF checkpoints in bertkit, and back

@pytest.mark.usefixtures("engine_path")  # the fast (unpadded) and the plain path
@pytest.mark.parametrize("impl", IMPLEMENTATIONS)
@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_hf_eurobert_checkpoint_matches_hf(case, impl, tmp_path):
    ours, _ = check_hf_checkpoint(EUROBERT, case, impl, tmp_path)
    assert (ours.config.num_key_value_heads, ours.config.rope_theta, ours.config.layer_norm_eps) == (2, 500.0, 1e-5)


@pytest.mark.usefixtures("engine_path")
@pytest.mark.parametrize("impl", IMPLEMENTATIONS)
@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_our_eurobert_checkpoint_loads_in_hf(case, impl, tmp_path):
    check_our_checkpoint(EUROBERT, case, impl, tmp_path)
    written = json.loads((tmp_path / "config.json").read_text())
    assert (written["pad_token_id"], written["bos_token_id"], written["eos_token_id"]) == (PAD, BOS, EOS)
    assert written["rope_parameters"] == {"rope_theta": 500.0, "rope_type": "default"}
    assert written["classifier_pooling"] == case.hf_config.get("classifier_pooling", "late")
    assert "hidden_dropout_prob" not in written and "layer_norm_eps" not in written


@pytest.mark.parametrize("impl", IMPLEMENTATIONS)
@pytest.mark.parametrize("rope", [None, {"rope_type": "linear", "factor": 2.0},
                                  {"rope_type": "llama3", "factor": 4.0, "low_freq_factor": 1.0,
                                   "high_freq_factor": 4.0, "original_max_position_embeddings": 8},
                                  {"rope_type": "yarn", "factor": 2.0, "original_max_position_embeddings": 8}],
                         ids=["default", "linear", "llama3", "yarn"])
def test_strong_weights_match_hf_and_the_rope_matters(impl, rope, tmp_path):
    """Weights far from 0 (attention far from uniform) over the padded batch, each rope type; another rope base
    changes the outputs, and so does pairing query heads with the wrong key/value heads, while the same model with
    each key/value head copied for its group of query heads (no grouping) gives the same outputs: the parity above
    is not parity of near-constant outputs, and query head j reads key/value head j // groups."""
    parameters = {"rope_theta": 500.0, "rope_type": "default", **(rope or {})}
    hf = strong(transformers.EuroBertModel(transformers.EuroBertConfig(
        **{**HF, "rope_parameters": parameters}, attn_implementation=impl))).eval()
    hf.save_pretrained(tmp_path)
    ours = bertkit.BERT.from_pretrained(tmp_path, attn_implementation=impl)
    assert ours.config.rope_scaling == rope
    ids, mask = padded_ids(EUROBERT)
    real = mask.bool()
    with torch.no_grad():
        got = ours(ids, mask)[0][real]
        want = hf(input_ids=ids, attention_mask=mask).last_hidden_state[real]
        torch.testing.assert_close(got, want, **TOL)
        other = bertkit.BERT(ours.config.replace(rope_theta=50.0)).eval()
        other.load_state_dict(ours.state_dict())
        assert (other(ids, mask)[0][real] - got).abs().max() > 1e-2
        for expand, same in ((torch.repeat_interleave, True), (lambda w, n, dim: w.repeat(n, 1, 1), False)):
            state = {name: expand(w.view(2, -1, w.shape[-1]), 3, dim=0).reshape(-1, w.shape[-1])
                     if re.search(r"[kv]_proj\.weight$", name) else w for name, w in ours.state_dict().items()}
            heads = bertkit.BERT(ours.config.replace(num_key_value_heads=None)).eval()
            heads.load_state_dict(state)
            difference = (heads(ids, mask)[0][real] - got).abs().max()
            assert difference < 1e-5 if same else difference > 1e-2


def test_untied_and_tied_heads_and_a_bias_only_with_mlp_bias():
    untied = bertkit.BERTForMaskedLM(EUROBERT.our_config(CASES["masked_lm"], "sdpa"))
    head = untied.cls.predictions
    assert isinstance(head.transform, torch.nn.Identity) and head.bias is None and head.decoder.bias is None
    assert head.decoder.weight is not untied.bert.embeddings.word_embeddings.weight
    tied = bertkit.BERTForMaskedLM(EUROBERT.our_config(CASES["masked_lm_tied_biased"], "sdpa"))
    assert tied.cls.predictions.decoder.weight is tied.bert.embeddings.word_embeddings.weight
    assert tied.cls.predictions.decoder.bias is tied.cls.predictions.bias
    resized = untied.resize_token_embeddings(101)
    assert resized.num_embeddings == 101 and untied.cls.predictions.bias is None
    assert untied(torch.tensor([[1, 100, 2]])).shape == (1, 3, 101)


def test_training_mode_dropout_matches_hf(tmp_path):
    """Train mode: HF's only dropout, on the attention probabilities (eager), gives the same masks from one seed."""
    case = CASES["token_cls"]
    hf = strong(transformers.EuroBertForTokenClassification(EUROBERT.hf_config(case, "eager", attention_dropout=0.2)))
    hf.save_pretrained(tmp_path)
    ours = bertkit.BERTForTokenClassification.from_pretrained(tmp_path, attn_implementation="eager")
    assert ours.config.attention_probs_dropout_prob == 0.2
    inputs = inputs_for(EUROBERT)
    mask = inputs["attention_mask"].bool()
    hf.train()
    ours.train()
    with fast.fast_path(False):
        torch.manual_seed(5)
        a = ours(**inputs)[mask]
        torch.manual_seed(5)
        b = hf(**inputs).logits[mask]
    torch.testing.assert_close(a, b, **TOL)
    with torch.no_grad():
        assert not torch.allclose(a, ours.eval()(**inputs)[mask], atol=1e-3)


# ---------------------------------------------------------------------------- the unpadded path

@pytest.mark.parametrize("case_id", ["masked_lm", "seq_cls_late", "seq_cls_mean", "seq_cls_bos", "token_cls"])
def test_unpadded_execution_equals_the_padded_path(case_id, monkeypatch):
    """The fast path drops padding (RMSNorms, projections, SwiGLU on the packed tokens; attention spread to the
    padded layout of the rotary tables), equal to the padded path at every real position, gradients too (bos: right
    padding, since a first-token reader keeps left-padded batches padded)."""
    case = CASES[case_id]
    model = strong(case.ours(EUROBERT.our_config(case, "sdpa"))).eval()
    ids, mask = padded_ids(EUROBERT)
    if case_id == "seq_cls_bos":
        ids, mask = ids[:2], mask[:2]
    check_fast_and_plain_paths_agree(model, ids, mask, monkeypatch)


def test_first_token_only_equals_the_full_last_layer():
    model = strong(bertkit.BERT(EUROBERT.our_config(CASES["model"], "sdpa"))).eval()
    ids, mask = padded_ids(EUROBERT)
    with torch.no_grad(), fast.fast_path(False):  # the fast path leaves 0 at padding positions (row 2's first)
        full = model.encode(ids, mask)
        first = model.encode(ids, mask, first_token_only=True)
    assert first.last_hidden_state.shape[1] == 1 and full.pooled_output is None
    torch.testing.assert_close(first.last_hidden_state[:, 0], full.last_hidden_state[:, 0], **TOL)


def test_optimized_bf16_autocast_and_int8_run_close_to_float32():
    """optimize_for_inference keeps float32 outputs (prepared kernels); bf16 autocast and dynamic int8 stay close."""
    def build():
        return strong(bertkit.BERTForMaskedLM(EUROBERT.our_config(CASES["masked_lm"], "sdpa")), seed=3).eval()

    ids, mask = padded_ids(EUROBERT)
    real = mask.bool()
    with torch.no_grad():
        reference = build()(ids, mask)[real]
        torch.testing.assert_close(bertkit.optimize_for_inference(build())(ids, mask)[real], reference,
                                   atol=1e-5, rtol=1e-5)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            low = build()(ids, mask)[real].float()
        quantized = bertkit.optimize_for_inference(build(), quantize="int8")(ids, mask)[real]
    for approximate, least in ((low, 0.99), (quantized, 0.95)):  # cosine similarity of all the logits
        assert float(torch.nn.functional.cosine_similarity(approximate.flatten(), reference.flatten(), dim=0)) > least


# ---------------------------------------------------------------------------- config, names, counts

def test_config_factory_and_hf_config_both_ways():
    config = bertkit.EuroBERTConfig()
    assert (config.family, config.vocab_size, config.hidden_act, config.layer_norm_eps, config.classifier_pooling,
            config.tie_word_embedding, config.embedding_layer_norm, config.max_position_embeddings) == (
        "eurobert", 128256, "silu", 1e-5, "late", False, False, 8192)
    assert (config.pad_token_id, config.cls_token_id, config.sep_token_id, config.mask_token_id) == (
        128001, 128000, 128001, 128002)
    assert bertkit.models.EuroBERTConfig is bertkit.EuroBERTConfig
    small = bertkit.EuroBERTConfig(**SHAPE, rope_theta=250_000.0, classifier_pooling="cls", num_labels=3,
                                   rope_scaling={"rope_type": "linear", "factor": 2.0}, pad_token_id=PAD,
                                   cls_token_id=BOS, sep_token_id=EOS, mask_token_id=MASK)
    assert BERTConfig.from_dict(small.to_dict()) == small
    written = small.to_hf_dict("BertForSequenceClassification")
    assert written["architectures"] == ["EuroBertForSequenceClassification"] and written["model_type"] == "eurobert"
    assert (written["classifier_pooling"], written["rms_norm_eps"], written["num_key_value_heads"],
            written["rope_parameters"]) == ("bos", 1e-5, 2, {"rope_theta": 250_000.0, "rope_type": "linear",
                                                              "factor": 2.0})
    assert BERTConfig.from_hf_dict(written) == small
    hf = transformers.EuroBertConfig.from_dict(written)
    assert (hf.classifier_pooling, hf.num_key_value_heads, hf.head_dim) == ("bos", 2, 6)
    assert BERTConfig.from_hf_dict(hf.to_dict()) == small
    # a released config: flat rope_theta (older transformers) and HF's defaults for what it leaves out
    released = {"model_type": "eurobert", "hidden_size": 1152, "num_attention_heads": 18, "num_key_value_heads": 6,
                "intermediate_size": 4096, "num_hidden_layers": 26, "rope_theta": 250000.0, "head_dim": 64}
    read = BERTConfig.from_hf_dict(released)
    assert (read.rope_theta, read.key_value_heads, read.head_dim, read.classifier_pooling) == (250000.0, 6, 64, "late")


def test_eurobert_names_table_both_ways():
    hf_names = {"model.embed_tokens.weight": 0, "model.layers.3.self_attn.k_proj.weight": 1,
                "model.layers.0.mlp.gate_proj.weight": 2, "model.layers.1.post_attention_layernorm.weight": 3,
                "model.norm.weight": 4, "dense.weight": 5, "dense.bias": 6, "classifier.weight": 7,
                "lm_head.weight": 8, "lm_head.bias": 9, "layers.0.input_layernorm.weight": 10, "norm.weight": 11,
                "embed_tokens.weight": 12}
    ours = hf_family_to_bertkit(hf_names, "eurobert")
    assert list(ours) == ["bert.embeddings.word_embeddings.weight", "bert.encoder.layer.3.self_attn.k_proj.weight",
                          "bert.encoder.layer.0.mlp.gate_proj.weight",
                          "bert.encoder.layer.1.post_attention_layernorm.weight", "bert.encoder.final_norm.weight",
                          "bert.pooler.dense.weight", "bert.pooler.dense.bias", "classifier.weight",
                          "cls.predictions.decoder.weight", "cls.predictions.bias",
                          "encoder.layer.0.input_layernorm.weight", "encoder.final_norm.weight",
                          "embeddings.word_embeddings.weight"]
    assert bertkit_to_hf_family(ours, "eurobert") == hf_names


@pytest.mark.parametrize("case_id", ["model", "masked_lm", "masked_lm_tied_biased", "seq_cls_late", "token_cls"])
def test_parameter_count_and_hf_size(case_id):
    case = CASES[case_id]
    config = EUROBERT.our_config(case, "sdpa")
    built = case.ours(config)
    assert count_parameters(config, case.ours.hf_architecture) == sum(p.numel() for p in built.parameters())
    hf = getattr(transformers, case.hf_class)(EUROBERT.hf_config(case, "eager"))
    assert sum(p.numel() for p in built.parameters()) == sum(p.numel() for p in hf.parameters())
    assert sum(isinstance(m, RMSNorm) for m in built.modules()) == 2 * SHAPE["num_hidden_layers"] + 1


@pytest.mark.parametrize(("make", "message"), [
    (lambda c: c.replace(classifier_pooling="bos"), r"classifier_pooling must be one of \('cls', 'mean', 'late'\)"),
    (lambda c: c.replace(num_key_value_heads=4), r"num_key_value_heads=4 must be a positive divisor of "
                                                 r"num_attention_heads \(6\)"),
    (lambda c: c.replace(is_decoder=True), "family 'eurobert' has no causal LM"),
    (lambda c: bertkit.BERTForPreTraining(c), "family 'eurobert' does not have"),
    (lambda c: c.replace(hidden_dropout_prob=0.1).to_hf_dict("BertModel"), "HF's EuroBert models fix it at 0.0"),
    (lambda c: BERTConfig.from_hf_dict({**c.to_hf_dict("BertModel"), "head_dim": 8}),
     r"head_dim=8 is not hidden_size / num_attention_heads = 6"),
    (lambda c: c.replace(classifier_pooling="late", family="modernbert"), "for family 'modernbert'"),
])
def test_what_eurobert_does_not_have_is_refused(make, message):
    with pytest.raises(ValueError, match=message):
        make(EUROBERT.our_config(CASES["model"], "sdpa"))


# ---------------------------------------------------------------------------- tokenizer and fill-mask

SPECIALS = ["<|begin_of_text|>", "<|end_of_text|>", "<|mask|>"]
#: Llama 3's pre-tokenizer split (contractions, letters, 1-3 digits, punctuation, newlines, spaces)
LLAMA3_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                r"|\s*[\r\n]+|\s+(?!\S)|\s+")


def llama3_style_tokenizer() -> transformers.PreTrainedTokenizerFast:
    """A Llama-3-style byte-level BPE (EuroBERT's kind) trained on Austen: the regex split then bytes, the special
    tokens of EuroBERT's tokenizer first (``<|begin_of_text|>`` 0... here), ``<|begin_of_text|> $A <|end_of_text|>``
    around a text (pairs: ``... $B <|end_of_text|>``), padding with ``<|end_of_text|>`` as EuroBERT's config does."""
    tok = Tokenizer(models.BPE(byte_fallback=False))
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(LLAMA3_SPLIT), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(austen_lines(), trainers.BpeTrainer(
        vocab_size=400, special_tokens=SPECIALS, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    tok.post_processor = processors.Sequence([
        processors.ByteLevel(trim_offsets=False),
        processors.TemplateProcessing(single="<|begin_of_text|> $A <|end_of_text|>",
                                      pair="<|begin_of_text|> $A <|end_of_text|> $B:1 <|end_of_text|>:1",
                                      special_tokens=[("<|begin_of_text|>", 0), ("<|end_of_text|>", 1)])])
    return transformers.PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<|begin_of_text|>",
                                                eos_token="<|end_of_text|>", pad_token="<|end_of_text|>",
                                                mask_token="<|mask|>", cls_token="<|begin_of_text|>",
                                                sep_token="<|end_of_text|>")


@pytest.fixture(scope="module")
def mlm_dir(tmp_path_factory):
    """An HF EuroBertForMaskedLM directory (strong random weights) with the Llama-3-style tokenizer."""
    directory = tmp_path_factory.mktemp("eurobert-mlm")
    tokenizer = llama3_style_tokenizer()
    config = transformers.EuroBertConfig(**{**HF, "vocab_size": len(tokenizer), "pad_token_id": 1, "bos_token_id": 0,
                                            "eos_token_id": 1, "mask_token_id": 2})
    strong(transformers.EuroBertForMaskedLM(config), seed=4).save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory


def test_tokenizer_equals_hfs_on_held_out_text(mlm_dir):
    ours = bertkit.AutoTokenizer.from_pretrained(mlm_dir)
    hf = transformers.AutoTokenizer.from_pretrained(mlm_dir)
    kwargs = dict(return_offsets_mapping=True, return_special_tokens_mask=True)
    for text in HELDOUT:
        assert_same(hf(text, **kwargs), ours(text, **kwargs), context=text)
    pairs = (HELDOUT[:6], HELDOUT[6:12])
    assert_same(hf(*pairs, **kwargs), ours(*pairs, **kwargs), context="pairs")
    cut = dict(truncation=True, max_length=12, padding="max_length")
    assert_same(hf(HELDOUT[:4], **cut), ours(HELDOUT[:4], **cut), context="truncated")
    ids = plain(ours("Anne was persuaded.")["input_ids"])
    assert ids[0] == 0 and ids[-1] == 1  # <|begin_of_text|> ... <|end_of_text|>
    assert (ours.mask_token, ours.pad_token_id) == ("<|mask|>", 1)


def test_fill_mask_top5_equals_hfs_pipeline(mlm_dir):
    text = "Anne Elliot was <|mask|> at Kellynch."
    want = transformers.pipeline("fill-mask", model=str(mlm_dir))(text, top_k=5)
    got = bertkit.pipeline("fill-mask", model=mlm_dir)(text, top_k=5)
    assert [g["token"] for g in got] == [w["token"] for w in want]
    assert [g["token_str"] for g in got] == [w["token_str"] for w in want]
    torch.testing.assert_close(torch.tensor([g["score"] for g in got]), torch.tensor([w["score"] for w in want]),
                               **TOL)


def test_hf_model_reads_our_fill_mask_directory(mlm_dir, tmp_path):
    ours = bertkit.BERTForMaskedLM.from_pretrained(mlm_dir)
    ours.save_pretrained(tmp_path)
    hf = hf_from_pretrained(transformers.EuroBertForMaskedLM, tmp_path, "sdpa")
    case = CASES["masked_lm"]
    family = FamilySetup("eurobert", transformers.EuroBertConfig, ours=OURS, hf=HF, pad=1,
                         vocab_size=ours.config.vocab_size)
    assert_pairs_close(ours_and_hf_outputs(family, case, ours.eval(), hf), "fill-mask directory")
