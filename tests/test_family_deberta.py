"""DeBERTa-v2/v3 as a family of the one engine (``BERTConfig(family="deberta-v2")``, layer variant ``"deberta"``).

Parity with HF transformers' ``DebertaV2*`` classes (a test-only dependency; no network), which attend eagerly
only: random weights are written by one library's ``save_pretrained`` and read by the other's ``from_pretrained``;
outputs, losses and gradients must agree at every real position of a padded batch (full, right- and left-padded
rows), with bertkit's eager and SDPA attention, on the fast (unpadded) and the plain engine path, for two configs:

* v3-style: relative positions in 8 log buckets (so the 20-token rows reach the logarithmic ones), shared position
  projections (``share_att_key``), the relative embeddings LayerNorm-ed, no absolute positions nor token types;
* v2-style: one relative position per distance clamped at 6, separate ``pos_key_proj`` / ``pos_query_proj``, the
  convolution after the first layer (``conv_kernel_size`` 3), absolute positions, two token types, a narrower
  ``embedding_size`` projected by ``embed_proj``.
"""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file
from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, trainers

pytest.importorskip("transformers")

import transformers
from transformers.models.deberta_v2 import modeling_deberta_v2 as hf_deberta

import bertkit
from bertkit.config import BERTConfig
from bertkit.modeling import fast
from bertkit.modeling.counting import count_parameters
from bertkit.modeling.deberta import log_buckets, relative_index
from bertkit.weights.tables import bertkit_to_hf_family, hf_family_to_bertkit
from conftest import randomize_
from family_dirs import austen_lines
from family_parity import (
    CHOICES,
    IMPLEMENTATIONS,
    MAX_DIFFS,
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
    qa_labels,
    token_labels,
)

transformers.logging.set_verbosity_error()
transformers.utils.logging.disable_progress_bar()

LENGTH = 20
BASE = dict(vocab_size=99, hidden_size=36, num_hidden_layers=2, num_attention_heads=3, intermediate_size=52,
            max_position_embeddings=64, layer_norm_eps=1e-7, hidden_dropout_prob=0.0,
            attention_probs_dropout_prob=0.0, pad_token_id=0, relative_attention=True)
V3 = dict(BASE, type_vocab_size=0, position_buckets=8, max_relative_positions=32, norm_rel_ebd="layer_norm",
          share_att_key=True, pos_att_type=["p2c", "c2p"], position_biased_input=False)
V2 = dict(BASE, type_vocab_size=2, max_relative_positions=6, share_att_key=False, pos_att_type=["c2p", "p2c"],
          position_biased_input=True, conv_kernel_size=3, conv_act="gelu", embedding_size=20)
SETUPS = {
    "v3": FamilySetup("deberta-v2", transformers.DebertaV2Config, ours=V3, hf=V3, length=LENGTH, right=6, left=7,
                      qa_spans=((1, 2, 8), (4, 5, 15)), hf_impl="eager",
                      grads_include=("encoder.rel_embeddings.weight", "encoder.LayerNorm.weight")),
    "v2": FamilySetup("deberta-v2", transformers.DebertaV2Config, ours=V2, hf=V2, type_vocab_size=2, length=LENGTH,
                      right=6, left=7, qa_spans=((1, 2, 8), (4, 5, 15)), hf_impl="eager",
                      grads_include=("encoder.rel_embeddings.weight", "encoder.conv.conv.weight",
                                     "attention.self.pos_key_proj.weight", "attention.self.pos_query_proj.weight")),
}


def both(**fields) -> dict:
    return dict(config=fields, hf_config=fields)


CASES = {c.id: c for c in (
    Case("model", bertkit.BERT, "DebertaV2Model", outputs=("last_hidden_state",), token_level=(True,)),
    Case("masked_lm", bertkit.BERTForMaskedLM, "DebertaV2ForMaskedLM", token_level=(True,),
         labels=lambda f, x: dict(labels=token_labels(x, f.vocab_size))),
    # HF's lm_predictions head decodes with the word embeddings from H: no narrower embedding_size
    Case("masked_lm_new_head", bertkit.BERTForMaskedLM, "DebertaV2ForMaskedLM",
         config=dict(legacy=False, embedding_size=None), hf_config=dict(legacy=False, embedding_size=36),
         token_level=(True,), labels=lambda f, x: dict(labels=token_labels(x, f.vocab_size))),
    Case("seq_cls", bertkit.BERTForSequenceClassification, "DebertaV2ForSequenceClassification",
         **both(num_labels=3, pooler_hidden_act="tanh"), labels=lambda f, x: dict(labels=torch.tensor([2, 0, 1]))),
    Case("seq_cls_regression", bertkit.BERTForSequenceClassification, "DebertaV2ForSequenceClassification",
         **both(num_labels=1), labels=lambda f, x: dict(labels=torch.tensor([0.5, -1.0, 2.0]))),
    Case("token_cls", bertkit.BERTForTokenClassification, "DebertaV2ForTokenClassification",
         **both(num_labels=5), token_level=(True,), labels=lambda f, x: dict(labels=token_labels(x, 5))),
    Case("qa", bertkit.BERTForQuestionAnswering, "DebertaV2ForQuestionAnswering",
         outputs=("start_logits", "end_logits"), token_level=(True, True), labels=qa_labels),
    Case("multiple_choice", bertkit.BERTForMultipleChoice, "DebertaV2ForMultipleChoice", choices=CHOICES,
         labels=lambda f, x: dict(labels=torch.tensor([1, 0, 1]))),
)}


# ---------------------------------------------------------------------------- HF checkpoints in bertkit, and back

@pytest.mark.usefixtures("engine_path")  # the fast (unpadded) and the plain path
@pytest.mark.parametrize("impl", IMPLEMENTATIONS)
@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
@pytest.mark.parametrize("setup", SETUPS.values(), ids=SETUPS.keys())
def test_hf_deberta_checkpoint_matches_hf(setup, case, impl, tmp_path):
    ours, _ = check_hf_checkpoint(setup, case, impl, tmp_path)
    assert ours.config.relative_attention and ours.config.pos_att_type == setup.ours["pos_att_type"]
    _record(case, impl, "HF -> ours")


#: ``(case id, direction) -> largest |ours - HF|`` over both setups, implementations and engine paths
WORST: dict[tuple[str, str], float] = {}


def _record(case: Case, impl: str, direction: str) -> None:
    key = (case.id, direction)
    WORST[key] = max(WORST.get(key, 0.0), MAX_DIFFS[f"deberta-v2/{case.id}/{impl} ({direction})"])


@pytest.mark.usefixtures("engine_path")
@pytest.mark.parametrize("impl", IMPLEMENTATIONS)
@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
@pytest.mark.parametrize("setup", SETUPS.values(), ids=SETUPS.keys())
def test_our_deberta_checkpoint_loads_in_hf(setup, case, impl, tmp_path):
    check_our_checkpoint(setup, case, impl, tmp_path)
    _record(case, impl, "ours -> HF")
    written = json.loads((tmp_path / "config.json").read_text())
    assert written["model_type"] == "deberta-v2" and written["position_buckets"] == setup.ours.get("position_buckets",
                                                                                                   -1)
    if case.id.startswith("masked_lm"):
        legacy = case.id == "masked_lm"
        names = set(json.loads((tmp_path / "model.safetensors").read_bytes()[8:8 + int.from_bytes(
            (tmp_path / "model.safetensors").read_bytes()[:8], "little")]))
        assert any(n.startswith("cls.predictions.") for n in names) == legacy
        assert any(n.startswith("lm_predictions.lm_head.") for n in names) != legacy


def test_parity_numbers_are_recorded():
    """The largest |ours - HF| of every case run above (printed with -s: the docs' parity table)."""
    for (case_id, direction), worst in sorted(WORST.items()):
        print(f"| {case_id} | {direction} | {worst:.1e} |")
        assert worst <= 2e-5


# ---------------------------------------------------------------------------- the relative positions

@pytest.mark.parametrize(("buckets", "max_position"), [(8, 32), (256, 512), (6, 10)])
def test_log_buckets_are_hfs(buckets, max_position):
    relative = torch.arange(-600, 601)
    want = hf_deberta.make_log_bucket_position(relative, buckets, max_position)
    torch.testing.assert_close(log_buckets(relative, buckets, max_position), want.long())


@pytest.mark.parametrize("setup", SETUPS.values(), ids=SETUPS.keys())
def test_relative_index_is_hfs(setup):
    config = BERTConfig(family="deberta-v2", **setup.ours)
    x = torch.zeros(1, 1, LENGTH, 4)
    span = config.position_buckets if config.position_buckets > 0 else config.max_relative_positions
    relative = hf_deberta.build_relative_position(x, x, bucket_size=config.position_buckets,
                                                  max_position=config.max_relative_positions)[0]
    torch.testing.assert_close(relative_index(LENGTH, config, torch.device("cpu")),
                               (relative + span).clamp(0, 2 * span - 1))


def test_only_the_reachable_relative_rows_are_read():
    """A batch of L tokens reads rows d(0, L-1) .. d(L-1, 0) of rel_embeddings, normed as HF norms all of them."""
    config = BERTConfig(family="deberta-v2", **V3)
    model = randomize_(bertkit.BERT(config), std=0.1).eval()
    context = model.encoder.relative
    tables = context(torch.zeros(1, 5, 36), allowed=None, position_ids=torch.arange(5)[None])["relative"]
    full = context.LayerNorm(context.rel_embeddings.weight)
    first = int(relative_index(5, config, torch.device("cpu"))[0, -1])
    assert tables.embeddings.shape[0] == 9 and int(tables.index.max()) == 8
    torch.testing.assert_close(tables.embeddings, full[first:first + 9])


@pytest.mark.parametrize("case_id", ["masked_lm", "seq_cls", "model"])
@pytest.mark.parametrize("setup", SETUPS.values(), ids=SETUPS.keys())
def test_unpadded_execution_equals_the_padded_path(setup, case_id, monkeypatch):
    """The fast path drops padding (projections, feed-forward and the convolution's LayerNorm on the packed tokens;
    attention and the convolution in the padded layout) and equals the padded path, gradients too (the
    first-token classifier: right padding, since it keeps left-padded batches padded)."""
    case = CASES[case_id]
    model = randomize_(case.ours(setup.our_config(case, "sdpa")), std=0.1).eval()
    ids, mask = padded_ids(setup)
    if case_id == "seq_cls":
        ids, mask = ids[:2], mask[:2]
    if case_id == "model":
        model = _first_output(model)
    check_fast_and_plain_paths_agree(model, ids, mask, monkeypatch)


def _first_output(backbone):
    class First(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.inner = backbone

        def forward(self, ids, mask):
            return self.inner(ids, mask)[0]

    return First()


@pytest.mark.parametrize("setup", SETUPS.values(), ids=SETUPS.keys())
def test_first_token_only_equals_the_full_last_layer(setup):
    for layers in (2, 1):  # one layer: the convolution at the first token too
        config = setup.our_config(CASES["model"], "sdpa", num_hidden_layers=layers)
        model = randomize_(bertkit.BERT(config), std=0.1).eval()
        ids, mask = padded_ids(setup)
        for on in (False, True):
            with torch.no_grad(), fast.fast_path(on):
                full = model.encode(ids[:2], mask[:2])
                first = model.encode(ids[:2], mask[:2], first_token_only=True)
            assert first.last_hidden_state.shape[1] == 1
            torch.testing.assert_close(first.last_hidden_state[:, 0], full.last_hidden_state[:, 0], **TOL)


def test_inputs_embeds_and_token_types_match_hf(tmp_path):
    setup, case = SETUPS["v2"], CASES["model"]
    hf = randomize_(transformers.DebertaV2Model(setup.hf_config(case, "eager")), std=0.1).eval()
    hf.save_pretrained(tmp_path)
    ours = bertkit.BERT.from_pretrained(tmp_path)
    ids, mask = padded_ids(setup)
    embeds = hf.embeddings.word_embeddings(ids).detach()
    types = torch.ones_like(ids)
    with torch.no_grad():
        for kwargs in (dict(inputs_embeds=embeds), dict(input_ids=ids, token_type_ids=types)):
            a = ours(attention_mask=mask, **kwargs)[0][mask.bool()]
            b = hf(attention_mask=mask, **kwargs).last_hidden_state[mask.bool()]
            torch.testing.assert_close(a, b, **TOL)


def test_v3_ignores_token_type_ids():
    model = randomize_(bertkit.BERT(BERTConfig(family="deberta-v2", **V3)), std=0.1).eval()
    assert model.embeddings.token_type_embeddings is None and model.embeddings.position_embeddings is None
    ids, mask = padded_ids(SETUPS["v3"])
    with torch.no_grad():
        torch.testing.assert_close(model(ids, mask, token_type_ids=torch.ones_like(ids))[0], model(ids, mask)[0])


def test_training_mode_dropout_applies():
    """Train mode: dropout applies (outputs change with the seed and differ from eval), the loss stays finite;
    the draws are not HF's (the relative rows are cut to those the batch reaches)."""
    setup, case = SETUPS["v3"], CASES["seq_cls"]
    model = randomize_(case.ours(setup.our_config(case, "sdpa", hidden_dropout_prob=0.1,
                                                  attention_probs_dropout_prob=0.1, context_pooler_dropout=0.1)),
                       std=0.1).train()
    inputs = inputs_for(setup)
    torch.manual_seed(0)
    a = model(**inputs)
    torch.manual_seed(1)
    b = model(**inputs)
    assert not torch.allclose(a, b)
    assert torch.isfinite(model.get_loss(torch.tensor([0, 1, 2]), **inputs))


# ---------------------------------------------------------------------------- config, names, counts

def test_config_factory_and_hf_round_trips():
    config = bertkit.DeBERTaV2Config()
    assert (config.family, config.vocab_size, config.hidden_size, config.type_vocab_size, config.position_buckets,
            config.pos_att_type, config.share_att_key, config.position_biased_input, config.layer_norm_eps) == \
        ("deberta-v2", 128100, 768, 0, 256, ["p2c", "c2p"], True, False, 1e-7)
    assert (config.pad_token_id, config.cls_token_id, config.sep_token_id, config.unk_token_id,
            config.mask_token_id) == (0, 1, 2, 3, 128000)
    assert bertkit.models.DeBERTaV2Config is bertkit.DeBERTaV2Config
    written = config.to_hf_dict("BertForSequenceClassification")
    assert written["architectures"] == ["DebertaV2ForSequenceClassification"]
    assert (written["pooler_hidden_act"], written["pooler_dropout"], written["norm_rel_ebd"]) == \
        ("gelu", 0.0, "layer_norm")
    assert BERTConfig.from_hf_dict(written) == config
    hf = transformers.DebertaV2Config.from_dict(written)
    assert (hf.position_buckets, hf.share_att_key, hf.pos_att_type, hf.type_vocab_size) == \
        (256, True, ["p2c", "c2p"], 0)
    assert BERTConfig.from_hf_dict(hf.to_dict()) == config
    assert BERTConfig.from_dict(config.to_dict()) == config
    # HF's own spelling of the attention terms, and its config's defaults where keys are left out
    assert BERTConfig.from_hf_dict({"model_type": "deberta-v2", "pos_att_type": "p2c|c2p"}).pos_att_type == \
        ["p2c", "c2p"]
    bare = BERTConfig.from_hf_dict({"model_type": "deberta-v2"})
    assert (bare.hidden_size, bare.type_vocab_size, bare.relative_attention, bare.layer_norm_eps) == \
        (1536, 0, False, 1e-7)
    # dropout names: HF's cls_dropout is the classifier's (ours pooler_dropout), its pooler_dropout the pooler's input
    two = BERTConfig.from_hf_dict({"model_type": "deberta-v2", "cls_dropout": 0.3, "pooler_dropout": 0.2})
    assert (two.pooler_dropout, two.context_pooler_dropout) == (0.3, 0.2)
    again = two.to_hf_dict("BertModel")
    assert (again["cls_dropout"], again["pooler_dropout"]) == (0.3, 0.2)
    for name in ("pooler_hidden_act", "relative_attention", "position_buckets", "pos_att_type"):
        assert name not in BERTConfig().to_dict()  # BERT's dict is unchanged


def test_names_table_both_ways():
    hf_names = {"deberta.encoder.layer.1.attention.self.query_proj.weight": 0,
                "deberta.encoder.layer.0.attention.self.pos_key_proj.bias": 1,
                "deberta.encoder.rel_embeddings.weight": 2, "deberta.encoder.LayerNorm.bias": 3,
                "deberta.encoder.conv.conv.weight": 4, "encoder.layer.0.attention.self.value_proj.bias": 5,
                "pooler.dense.weight": 6, "cls.predictions.transform.dense.weight": 7, "cls.predictions.bias": 8,
                "deberta.embeddings.embed_proj.weight": 9, "classifier.weight": 10}
    ours = hf_family_to_bertkit(hf_names, "deberta-v2")
    assert list(ours) == ["bert.encoder.layer.1.attention.self.query.weight",
                          "bert.encoder.layer.0.attention.self.pos_key_proj.bias",
                          "bert.encoder.relative.rel_embeddings.weight", "bert.encoder.relative.LayerNorm.bias",
                          "bert.encoder.layer.0.conv.conv.weight", "encoder.layer.0.attention.self.value.bias",
                          "bert.pooler.dense.weight", "cls.predictions.transform.dense.weight",
                          "cls.predictions.bias", "bert.embeddings.embed_proj.weight", "classifier.weight"]
    assert bertkit_to_hf_family(ours, "deberta-v2") == hf_names
    new_head = {"lm_predictions.lm_head.dense.weight": 0, "lm_predictions.lm_head.bias": 1}
    assert list(hf_family_to_bertkit(new_head, "deberta-v2")) == ["cls.predictions.transform.dense.weight",
                                                                  "cls.predictions.bias"]
    assert bertkit_to_hf_family(hf_family_to_bertkit(new_head, "deberta-v2"),
                                "deberta-v2/lm_predictions") == new_head


@pytest.mark.parametrize("case_id", [c for c in CASES if c != "seq_cls_regression"])
@pytest.mark.parametrize("setup", SETUPS.values(), ids=SETUPS.keys())
def test_parameter_count_and_hf_size(setup, case_id):
    case = CASES[case_id]
    config = setup.our_config(case, "sdpa")
    built = case.ours(config)
    assert count_parameters(config, case.ours.hf_architecture) == sum(p.numel() for p in built.parameters())
    hf = getattr(transformers, case.hf_class)(setup.hf_config(case, "eager"))
    assert sum(p.numel() for p in built.parameters()) == sum(p.numel() for p in hf.parameters())


@pytest.mark.parametrize(("change", "message"), [
    (dict(pos_att_type=["c2p", "p2p"]), re.escape("'p2p' is not a DeBERTa-v2 attention term")),
    (dict(pos_att_type="p2c|p2p"), "drop 'p2p'"),
    (dict(position_buckets=0), "position_buckets=0: use -1"),
    (dict(position_buckets=80, max_relative_positions=32), "lower position_buckets"),
    (dict(norm_rel_ebd="batch_norm"), "norm_rel_ebd='batch_norm' is not supported"),
    (dict(conv_kernel_size=2), "conv_kernel_size=2: use 0"),
    (dict(conv_act="mish"), "conv_act 'mish' is unknown"),
    (dict(legacy=False, tie_word_embedding=False), "legacy=False"),
    (dict(legacy=False, embedding_size=20), "legacy=False"),
    (dict(is_decoder=True), "family 'deberta-v2' has no causal LM"),
    (dict(type_vocab_size=-1), "type_vocab_size must be a positive integer"),
])
def test_unsupported_settings_are_one_line_errors(change, message):
    with pytest.raises(ValueError, match=message) as error:
        BERTConfig(family="deberta-v2", **{**V3, **change})
    assert "\n" not in str(error.value)


def test_an_hf_config_with_p2p_is_refused_naming_the_key(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "deberta-v2", "pos_att_type": ["p2c", "p2p"]}))
    with pytest.raises(ValueError, match=r"config\.json: BERTConfig\.pos_att_type=.*drop 'p2p'"):
        BERTConfig.from_json_file(tmp_path / "config.json")


def test_what_deberta_does_not_have_is_refused():
    config = BERTConfig(family="deberta-v2", **V3)
    for make in (bertkit.BERTForPreTraining, bertkit.BERTForNextSentencePrediction):
        with pytest.raises(ValueError, match="family 'deberta-v2' does not have"):
            make(config)
    with pytest.raises(ValueError, match=r"Google's bert_config\.json describes BERT"):
        config.to_google_dict()


def test_untied_legacy_mlm_both_ways(tmp_path):
    setup, case = SETUPS["v3"], CASES["masked_lm"]
    hf = randomize_(transformers.DebertaV2ForMaskedLM(setup.hf_config(case, "eager", tie_word_embeddings=False)),
                    std=0.1)
    hf.save_pretrained(tmp_path / "hf")
    ours = bertkit.BERTForMaskedLM.from_pretrained(tmp_path / "hf")
    assert not ours.config.tie_word_embedding and ours.load_report.initialized == []
    assert_pairs_close(ours_and_hf_outputs(setup, case, ours.eval(), hf.eval()), "untied (HF writes)")
    ours.save_pretrained(tmp_path / "ours")
    back = hf_from_pretrained(transformers.DebertaV2ForMaskedLM, tmp_path / "ours", "eager")
    assert_pairs_close(ours_and_hf_outputs(setup, case, ours, back), "untied (ours writes)")


# ---------------------------------------------------------------------------- released checkpoints' layouts

def _deberta_tokenizer():
    """HF's DebertaV2Tokenizer over a Unigram vocabulary trained here ([PAD] 0, [CLS] 1, [SEP] 2, [UNK] 3, [MASK]
    last, as deberta-v3's)."""
    tok = Tokenizer(models.Unigram())
    tok.normalizer = normalizers.NFKC()
    tok.pre_tokenizer = pre_tokenizers.Metaspace()
    tok.train_from_iterator(austen_lines(), trainers.UnigramTrainer(
        vocab_size=300, special_tokens=["[PAD]", "[CLS]", "[SEP]", "[UNK]"], unk_token="[UNK]"))
    vocab = [tuple(piece) for piece in json.loads(tok.to_str())["model"]["vocab"]] + [("[MASK]", 0.0)]
    return transformers.DebertaV2Tokenizer(vocab=vocab)


@pytest.mark.parametrize("legacy", [False, True])
def test_fill_mask_top5_equals_hfs_pipeline(legacy, tmp_path):
    tokenizer = _deberta_tokenizer()
    config = SETUPS["v3"].hf_config(CASES["masked_lm"], "eager", vocab_size=len(tokenizer), legacy=legacy)
    randomize_(transformers.DebertaV2ForMaskedLM(config), std=0.3).save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    text = "Emma was [MASK] and rich, and [MASK] too."
    want = transformers.pipeline("fill-mask", model=str(tmp_path))(text, top_k=5)
    got = bertkit.pipeline("fill-mask", model=tmp_path)(text, top_k=5)
    for ours, theirs in zip(got, want, strict=True):
        assert [(a["token"], a["token_str"], a["sequence"]) for a in ours] == \
            [(a["token"], a["token_str"], a["sequence"]) for a in theirs]
        np.testing.assert_allclose([a["score"] for a in ours], [a["score"] for a in theirs], atol=1e-5)


def test_released_v3_layout_loads_whatever_legacy_says(tmp_path):
    """deberta-v3's checkpoints hold the lm_predictions head, the replaced-token-detection head mask_predictions.*
    and (in some) position_embeddings that no layer reads, with configs that leave legacy at HF's True: HF's
    masked LM then re-initialises its head; bertkit reads lm_predictions into the same modules and skips the
    rest, as HF's classes do (nothing dropped, nothing initialised)."""
    setup, case = SETUPS["v3"], CASES["masked_lm_new_head"]
    hf = randomize_(transformers.DebertaV2ForMaskedLM(setup.hf_config(case, "eager")), std=0.1).eval()
    hf.save_pretrained(tmp_path)
    state = load_file(tmp_path / "model.safetensors")
    state["deberta.embeddings.position_embeddings.weight"] = torch.zeros(64, 36)
    state["mask_predictions.dense.weight"] = torch.zeros(36, 36)
    save_file(state, tmp_path / "model.safetensors", metadata={"format": "pt"})
    written = json.loads((tmp_path / "config.json").read_text())
    del written["legacy"]
    (tmp_path / "config.json").write_text(json.dumps(written))
    ours = bertkit.BERTForMaskedLM.from_pretrained(tmp_path)
    report = ours.load_report
    assert ours.config.legacy and report.initialized == report.dropped == [], str(report)
    assert_pairs_close(ours_and_hf_outputs(setup, case, ours.eval(), hf), "v3 layout")
    backbone = bertkit.BERT.from_pretrained(tmp_path)
    assert backbone.load_report.initialized == [] and backbone.embeddings.position_embeddings is None


@pytest.mark.parametrize("dtype", ["int8", "bf16"])
def test_quantized_and_bf16_inference_stays_close(dtype, tmp_path):
    """int8 (dynamic, through the engine's Linear) and bf16 run the DeBERTa layer too (the position projections
    are Linears like the rest); their logits stay near the float model's."""
    setup, case = SETUPS["v2"], CASES["seq_cls"]
    model = randomize_(case.ours(setup.our_config(case, "sdpa")), std=0.1).eval()
    inputs = inputs_for(setup)
    with torch.no_grad():
        want = model(**inputs)
    fast_model = bertkit.optimize_for_inference(model, **({"quantize": "int8"} if dtype == "int8"
                                                          else {"dtype": torch.bfloat16}))
    with torch.no_grad():
        got = fast_model(**inputs).float()
    assert torch.isfinite(got).all()
    torch.testing.assert_close(got, want, atol=0.15, rtol=0.1)


@pytest.mark.parametrize("setup", SETUPS.values(), ids=SETUPS.keys())
def test_onnx_export_verifies_in_onnxruntime(setup, tmp_path):
    """Traced graphs keep every relative row (any length) and equal PyTorch on batches of other sizes."""
    pytest.importorskip("onnxruntime")
    from bertkit.export import export_onnx

    case = CASES["seq_cls"]
    model = randomize_(case.ours(setup.our_config(case, "sdpa")), std=0.1).eval()
    report = export_onnx(model, tmp_path, opset=17)
    assert max(report.max_abs_diff.values()) < 1e-4
