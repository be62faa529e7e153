"""ModernBERT as a family of the one engine (``BERTConfig(family="modernbert")``, layer variant ``"modernbert"``).

Parity with HF transformers' ``ModernBert*`` classes (a test-only dependency; no network): random weights are
written by one library's ``save_pretrained`` and read by the other's ``from_pretrained``; outputs, losses and
gradients must agree at every real position of a padded batch (right- and left-padded rows), with eager and
SDPA attention, on the fast and the plain engine path. The sequences (20 tokens) are longer than the sliding
window (8: keys within 4 positions), and the 4 layers are global, local, local, global, so both kinds run.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

import pytest
import torch

pytest.importorskip("transformers")

import transformers
from transformers.masking_utils import sliding_window_bidirectional_overlay

import bertkit
from bertkit.config import BERTConfig
from bertkit.modeling import fast, unpad
from bertkit.modeling.counting import count_parameters
from bertkit.modeling.modernbert import sliding_window_mask
from bertkit.weights.tables import bertkit_to_hf_family
from family_parity import padded_batch, token_labels

transformers.logging.set_verbosity_error()
transformers.utils.logging.disable_progress_bar()

TOL = dict(atol=2e-5, rtol=2e-5)
IMPLEMENTATIONS = ("eager", "sdpa")
PAD, CLS, SEP = 1, 2, 3
#: odd sizes (hidden 36 / 3 heads, inner 26, vocab 99); global layers 0 and 3, sliding windows of 8 in 1 and 2;
#: thetas other than the defaults (and apart), so that a swapped or ignored theta shows
SIZES = dict(vocab_size=99, hidden_size=36, num_hidden_layers=4, num_attention_heads=3, intermediate_size=26,
             global_attn_every_n_layers=3, local_attention=8, global_rope_theta=1000.0, local_rope_theta=100.0,
             pad_token_id=PAD, cls_token_id=CLS, sep_token_id=SEP)
#: every bias HF's ModernBERT can have (all off by default)
BIASES = dict(attention_bias=True, mlp_bias=True, norm_bias=True, classifier_bias=True)
BATCH, LENGTH, CHOICES = 3, 20, 2


def padded_ids(rows: int = BATCH, seed: int = 1, left: bool = True,
               pads: tuple[int, int] = (7, 6)) -> tuple[torch.Tensor, torch.Tensor]:
    """``(input_ids, attention_mask)``: rows alternately full, right-padded and left-padded (``left=False``: right),
    by ``pads`` tokens; the default reaches beyond the window (padding queries with no key within 4 positions)."""
    return padded_batch(SIZES["vocab_size"], PAD, rows, LENGTH, right=pads[0], left=pads[1], left_padded=left,
                        seed=seed, lowest_id=4)


def qa_labels(inputs):
    start, end = torch.tensor([1, 2, 7]), torch.tensor([4, 5, 12])  # real tokens of each row
    start[1] = LENGTH + 7  # outside: clamped and ignored by both
    return dict(start_positions=start, end_positions=end)


@dataclass(frozen=True)
class Case:
    id: str
    ours: type
    hf_class: str
    config: dict = field(default_factory=dict)
    outputs: tuple[str, ...] = ("logits",)
    token_level: tuple[bool, ...] = (False,)
    labels: object = None  # inputs -> HF label kwargs
    choices: int = 0
    left_padding: bool = True


CASES = {c.id: c for c in (
    Case("model", bertkit.BERT, "ModernBertModel", outputs=("last_hidden_state",), token_level=(True,)),
    Case("masked_lm", bertkit.BERTForMaskedLM, "ModernBertForMaskedLM", token_level=(True,),
         labels=lambda x: dict(labels=token_labels(x, SIZES["vocab_size"]))),
    # "cls" pooling reads position 0, a padding position in a left-padded row (where HF's own eager and SDPA
    # disagree: a query with no key in its window), so this batch is right-padded; "mean" takes the left padding
    Case("seq_cls", bertkit.BERTForSequenceClassification, "ModernBertForSequenceClassification",
         config=dict(num_labels=3), labels=lambda x: dict(labels=torch.tensor([2, 0, 1])), left_padding=False),
    Case("seq_cls_mean", bertkit.BERTForSequenceClassification, "ModernBertForSequenceClassification",
         config=dict(num_labels=3, classifier_pooling="mean"), labels=lambda x: dict(labels=torch.tensor([2, 0, 1]))),
    Case("seq_cls_regression", bertkit.BERTForSequenceClassification, "ModernBertForSequenceClassification",
         config=dict(num_labels=1, classifier_pooling="mean"),
         labels=lambda x: dict(labels=torch.tensor([0.5, -1.0, 2.0]))),
    Case("token_cls", bertkit.BERTForTokenClassification, "ModernBertForTokenClassification",
         config=dict(num_labels=5), token_level=(True,), labels=lambda x: dict(labels=token_labels(x, 5))),
    Case("qa", bertkit.BERTForQuestionAnswering, "ModernBertForQuestionAnswering",
         outputs=("start_logits", "end_logits"), token_level=(True, True), labels=qa_labels),
    # multiple choice reads the first real token, left-padded or not, as HF does
    Case("multiple_choice", bertkit.BERTForMultipleChoice, "ModernBertForMultipleChoice", choices=CHOICES,
         labels=lambda x: dict(labels=torch.tensor([1, 0, 1]))),
    Case("multiple_choice_mean", bertkit.BERTForMultipleChoice, "ModernBertForMultipleChoice", choices=CHOICES,
         config=dict(classifier_pooling="mean"), labels=lambda x: dict(labels=torch.tensor([1, 0, 1]))),
)}


def inputs_for(case: Case, pads: tuple[int, int] = (7, 6)) -> dict[str, torch.Tensor]:
    ids, mask = padded_ids(BATCH * case.choices if case.choices else BATCH, left=case.left_padding, pads=pads)
    inputs = dict(input_ids=ids, attention_mask=mask)
    return {k: v.view(BATCH, case.choices, LENGTH) for k, v in inputs.items()} if case.choices else inputs


def randomize(model: torch.nn.Module, seed: int = 0, std: float = 0.1) -> torch.nn.Module:
    """Every parameter random (LayerNorm weights around 1), so no zero-init hides a bug; HF's and our names."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=g) * std
            p.copy_(1.0 + noise if re.search(r"(norm|LayerNorm)\.weight$", name) else noise)
    return model


def hf_config(case: Case, impl: str, **extra) -> transformers.ModernBertConfig:
    return transformers.ModernBertConfig(**{**SIZES, **case.config, **extra}, bos_token_id=CLS, eos_token_id=SEP,
                                         attn_implementation=impl)


def our_config(case: Case, impl: str, **extra) -> BERTConfig:
    return bertkit.ModernBERTConfig(**{**SIZES, **case.config, **extra}, attn_implementation=impl)


def hf_from_pretrained(cls, directory, impl):
    model, info = cls.from_pretrained(directory, attn_implementation=impl, output_loading_info=True)
    assert not any(info[k] for k in ("missing_keys", "unexpected_keys", "mismatched_keys")), info
    assert model.config._attn_implementation == impl
    return model.eval()


def ours_and_hf_outputs(case, ours, hf, inputs=None):
    inputs = inputs_for(case) if inputs is None else inputs
    mask = inputs["attention_mask"].bool()
    with torch.no_grad():
        got = ours(**inputs)
        ref = hf(**inputs)
    got = got if isinstance(got, tuple) else (got,)
    if isinstance(ours, bertkit.BERT):  # (sequence_output, pooled_output): ModernBERT has no pooler
        assert got[1] is None
        got = got[:1]
    return [(name, a[mask] if token_level else a, getattr(ref, name)[mask] if token_level else getattr(ref, name))
            for name, a, token_level in zip(case.outputs, got, case.token_level, strict=True)]


def assert_pairs_close(pairs, what):
    for name, a, b in pairs:
        assert a.shape == b.shape, f"{what} {name}: {tuple(a.shape)} vs HF {tuple(b.shape)}"
        torch.testing.assert_close(a, b, **TOL, msg=lambda m, n=name: f"{what} {n}: {m}")


def losses_and_gradients(case, ours, hf, pads: tuple[int, int] = (7, 6)):
    """``(our loss, HF loss, [(HF param name, our grad, HF grad)])`` for the case's labels."""
    inputs = inputs_for(case, pads)
    labels = case.labels(inputs)
    ours.zero_grad()
    hf.zero_grad()
    if case.id == "qa":
        loss = ours.get_loss(labels["start_positions"], labels["end_positions"], **inputs)
    else:
        loss = ours.get_loss(labels["labels"], **inputs)
    loss.backward()
    ref = hf(**inputs, **labels).loss
    ref.backward()
    our_grads = bertkit_to_hf_family({n: p.grad for n, p in ours.named_parameters() if p.grad is not None},
                                     "modernbert")
    hf_grads = {n: p.grad for n, p in hf.named_parameters() if p.grad is not None}
    assert hf_grads and set(hf_grads) <= set(our_grads), sorted(set(hf_grads) - set(our_grads))
    return loss, ref, [(n, our_grads[n], g) for n, g in hf_grads.items()]


# ---------------------------------------------------------------------------- HF checkpoints in bertkit

@pytest.mark.usefixtures("engine_path")  # the fast and the plain path
@pytest.mark.parametrize("impl", IMPLEMENTATIONS)
@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_hf_modernbert_checkpoint_matches_hf(case, impl, tmp_path):
    hf = randomize(getattr(transformers, case.hf_class)(hf_config(case, impl))).eval()
    hf.save_pretrained(tmp_path)
    ours = case.ours.from_pretrained(tmp_path)
    report = ours.load_report
    assert report.initialized == report.dropped == report.resized == [], str(report)
    assert ours.config.family == "modernbert" and ours.config.attn_implementation == "sdpa"  # HF writes no impl
    ours = case.ours.from_pretrained(tmp_path, attn_implementation=impl)
    assert_pairs_close(ours_and_hf_outputs(case, ours, hf), f"{case.id}/{impl}")
    if case.labels is not None:
        loss, ref, grads = losses_and_gradients(case, ours, hf)
        torch.testing.assert_close(loss, ref, **TOL)
        if case.id == "qa" and impl == "eager":
            # The span loss normalises over padding positions too. HF's eager attention adds the lowest float to
            # masked scores: a padding query without any key in its window averages every value (so does
            # bertkit's), but autograd then carries gradients through scores that float32 has absorbed, where
            # bertkit's masked scores are constants. Its gradients are compared with padding within the window.
            loss, ref, grads = losses_and_gradients(case, ours, hf, pads=(3, 3))
            torch.testing.assert_close(loss, ref, **TOL)
        assert_pairs_close(grads, f"{case.id}/{impl} gradient")


@pytest.mark.parametrize("case_id", ["masked_lm", "seq_cls_mean", "qa"])
def test_every_bias_and_other_activations_match_hf(case_id, tmp_path):
    """The biases HF's ModernBERT can switch on (projections, MLP, LayerNorms, the head's dense layer), a tanh GELU
    in the layers and SiLU in the head: both directions."""
    case = CASES[case_id]
    extra = dict(BIASES, hidden_activation="gelu_pytorch_tanh", classifier_activation="silu")
    hf = randomize(getattr(transformers, case.hf_class)(hf_config(case, "sdpa", **extra))).eval()
    hf.save_pretrained(tmp_path / "hf")
    ours = case.ours.from_pretrained(tmp_path / "hf")
    assert (ours.config.hidden_act, ours.config.classifier_activation) == ("gelu_tanh", "silu")
    assert all(getattr(ours.config, name) for name in BIASES)
    assert_pairs_close(ours_and_hf_outputs(case, ours, hf), f"{case_id} with biases")
    loss, ref, grads = losses_and_gradients(case, ours, hf)
    torch.testing.assert_close(loss, ref, **TOL)
    assert_pairs_close(grads, f"{case_id} with biases: gradient")
    ours.save_pretrained(tmp_path / "ours")
    back = hf_from_pretrained(getattr(transformers, case.hf_class), tmp_path / "ours", "sdpa")
    assert_pairs_close(ours_and_hf_outputs(case, ours, back), f"{case_id} with biases (ours -> HF)")


def test_inputs_embeds_and_explicit_position_ids_match_hf(tmp_path):
    case = CASES["model"]
    hf = randomize(transformers.ModernBertModel(hf_config(case, "sdpa"))).eval()
    hf.save_pretrained(tmp_path)
    ours = bertkit.BERT.from_pretrained(tmp_path)
    ids, mask = padded_ids()
    embeds = hf.embeddings.tok_embeddings(ids).detach()
    positions = torch.arange(LENGTH).flip(0)[None].expand(BATCH, -1) * 3  # rotary positions beyond the window
    with torch.no_grad():
        for kwargs in (dict(inputs_embeds=embeds), dict(input_ids=ids, position_ids=positions)):
            a = ours(attention_mask=mask, **kwargs)[0][mask.bool()]
            b = hf(attention_mask=mask, **kwargs).last_hidden_state[mask.bool()]
            torch.testing.assert_close(a, b, **TOL)


def test_attention_probabilities_match_hf_eager(tmp_path):
    """Per layer: global layers see every real key, sliding-window layers those within 4 positions."""
    case = CASES["model"]
    hf = randomize(transformers.ModernBertModel(hf_config(case, "eager"))).eval()
    hf.save_pretrained(tmp_path)
    ours = bertkit.BERT.from_pretrained(tmp_path, attn_implementation="eager")
    ids, mask = padded_ids()
    with torch.no_grad():
        got = ours.encode(ids, mask, output_attentions=True).attentions
        ref = hf(input_ids=ids, attention_mask=mask, output_attentions=True).attentions
    real = mask.bool()
    for layer, (a, b) in enumerate(zip(got, ref, strict=True)):
        a, b = a.transpose(1, 2)[real], b.transpose(1, 2)[real]  # [N real queries, nh, S]
        torch.testing.assert_close(a, b, **TOL, msg=lambda m, i=layer: f"layer {i}: {m}")
    far = got[1][0, :, 10, 15]  # a local layer: key 15 is 5 positions from query 10
    assert torch.equal(far, torch.zeros_like(far)) and bool((got[0][0, :, 10, 15] > 0).all())


def test_dropout_in_training_matches_hf(tmp_path):
    """Train mode, eager: the embedding, attention, attention-output, MLP and classifier dropouts draw the same
    masks from one seed (torch's own dropout, in HF's order)."""
    case = CASES["seq_cls_mean"]
    extra = dict(embedding_dropout=0.1, attention_dropout=0.2, mlp_dropout=0.15, classifier_dropout=0.3)
    hf = randomize(transformers.ModernBertForSequenceClassification(hf_config(case, "eager", **extra)))
    hf.save_pretrained(tmp_path)
    ours = bertkit.BERTForSequenceClassification.from_pretrained(tmp_path, attn_implementation="eager")
    assert (ours.config.hidden_dropout_prob, ours.config.attention_probs_dropout_prob, ours.config.mlp_dropout,
            ours.config.classifier_dropout) == (0.1, 0.2, 0.15, 0.3)
    inputs = inputs_for(case)
    hf.train()
    ours.train()
    with fast.fast_path(False):
        torch.manual_seed(5)
        a = ours(**inputs)
        torch.manual_seed(5)
        b = hf(**inputs).logits
    torch.testing.assert_close(a, b, **TOL)
    with torch.no_grad():
        assert not torch.allclose(a, ours.eval()(**inputs), atol=1e-3)  # the dropout really dropped


# ---------------------------------------------------------------------------- bertkit checkpoints in HF

@pytest.mark.usefixtures("engine_path")
@pytest.mark.parametrize("impl", IMPLEMENTATIONS)
@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_our_modernbert_checkpoint_loads_in_hf(case, impl, tmp_path):
    ours = randomize(case.ours(our_config(case, impl)), seed=1).eval()
    ours.save_pretrained(tmp_path)
    written = json.loads((tmp_path / "config.json").read_text())
    assert written["model_type"] == "modernbert" and written["architectures"] == [case.hf_class]
    assert (written["pad_token_id"], written["cls_token_id"], written["sep_token_id"]) == (PAD, CLS, SEP)
    assert (written["bos_token_id"], written["eos_token_id"]) == (CLS, SEP)
    hf = hf_from_pretrained(getattr(transformers, case.hf_class), tmp_path, impl)
    assert hf.config.layer_types == ["full_attention", "sliding_attention", "sliding_attention", "full_attention"]
    assert hf.config.sliding_window == 4 and hf.config.classifier_pooling == ours.config.classifier_pooling
    assert_pairs_close(ours_and_hf_outputs(case, ours, hf), f"{case.id}/{impl} (ours -> HF)")
    again = case.ours.from_pretrained(tmp_path, attn_implementation=impl)
    assert again.config == ours.config
    for (name, a), b in zip(ours.state_dict().items(), again.state_dict().values(), strict=True):
        assert torch.equal(a, b), name


@pytest.mark.parametrize("source", ["hf", "ours"])
def test_untied_mlm_head_both_ways(source, tmp_path):
    case = CASES["masked_lm"]
    if source == "hf":
        hf = randomize(transformers.ModernBertForMaskedLM(hf_config(case, "sdpa", tie_word_embeddings=False)))
        hf.save_pretrained(tmp_path)
        ours = bertkit.BERTForMaskedLM.from_pretrained(tmp_path)
        assert ours.load_report.initialized == ours.load_report.dropped == []
    else:
        ours = randomize(bertkit.BERTForMaskedLM(our_config(case, "sdpa", tie_word_embedding=False)))
        ours.save_pretrained(tmp_path)
        hf = hf_from_pretrained(transformers.ModernBertForMaskedLM, tmp_path, "sdpa")
    assert not ours.config.tie_word_embedding
    assert hf.decoder.weight is not hf.model.embeddings.tok_embeddings.weight
    assert_pairs_close(ours_and_hf_outputs(case, ours.eval(), hf.eval()), f"untied ({source} writes)")


def test_converting_a_modernbert_checkpoint_keeps_it_modernbert(tmp_path):
    from bertkit.weights.convert import convert

    case = CASES["token_cls"]
    hf = randomize(transformers.ModernBertForTokenClassification(hf_config(case, "sdpa"))).eval()
    hf.save_pretrained(tmp_path / "hf")
    convert(tmp_path / "hf", tmp_path / "out")
    written = json.loads((tmp_path / "out" / "config.json").read_text())
    assert written["architectures"] == ["ModernBertForTokenClassification"]
    back = hf_from_pretrained(transformers.ModernBertForTokenClassification, tmp_path / "out", "sdpa")
    inputs = inputs_for(case)
    with torch.no_grad():
        torch.testing.assert_close(back(**inputs).logits, hf(**inputs).logits, **TOL)
    with pytest.raises(ValueError, match="describes BERT"):
        convert(tmp_path / "hf", tmp_path / "tf", to="tf")


# ---------------------------------------------------------------------------- one head for MLM and classifiers

@pytest.mark.parametrize("task", ["seq_cls_mean", "qa"])
def test_a_masked_lm_checkpoint_gives_classifiers_its_head_as_hf_does(task, tmp_path):
    """HF's ``head`` is one module name in the masked LM and in every classifier: fine-tuning from the pretrained
    MLM starts from its head in HF, and so it does here (only the classifier itself is new)."""
    case = CASES[task]
    randomize(transformers.ModernBertForMaskedLM(hf_config(CASES["masked_lm"], "sdpa"))).save_pretrained(tmp_path)
    ours = case.ours.from_pretrained(tmp_path, warn=False, **case.config)
    hf = getattr(transformers, case.hf_class).from_pretrained(tmp_path, **case.config)
    out = "qa_outputs" if task == "qa" else "classifier"
    assert sorted(ours.load_report.initialized) == [f"{out}.bias", f"{out}.weight"]
    assert ours.load_report.dropped == ["cls.predictions.bias"]
    torch.testing.assert_close(ours.head.dense.weight, hf.head.dense.weight, rtol=0, atol=0)
    torch.testing.assert_close(ours.head.LayerNorm.weight, hf.head.norm.weight, rtol=0, atol=0)
    with torch.no_grad():  # both classifiers are new: give ours HF's values and compare the outputs
        getattr(ours, out).weight.copy_(hf.classifier.weight)
        getattr(ours, out).bias.copy_(hf.classifier.bias)
    assert_pairs_close(ours_and_hf_outputs(case, ours.eval(), hf.eval()), f"{task} from the MLM")
    ours.save_pretrained(tmp_path / "back")  # and a classifier's head goes back into a masked LM
    mlm = bertkit.BERTForMaskedLM.from_pretrained(tmp_path / "back", warn=False)
    assert sorted(mlm.load_report.initialized) == ["cls.predictions.bias"]
    torch.testing.assert_close(mlm.cls.predictions.transform.dense.weight, ours.head.dense.weight, rtol=0, atol=0)


def test_classifier_heads_read_through_the_shared_head():
    config = our_config(CASES["seq_cls"], "sdpa")
    heads = {cls: {n for n, _ in cls(config).named_parameters() if not n.startswith("bert.")}
             for cls in (bertkit.BERTForSequenceClassification, bertkit.BERTForTokenClassification,
                         bertkit.BERTForMultipleChoice, bertkit.BERTForQuestionAnswering)}
    for cls, names in heads.items():
        out = "qa_outputs" if cls is bertkit.BERTForQuestionAnswering else "classifier"
        assert names == {"head.dense.weight", "head.LayerNorm.weight", f"{out}.weight", f"{out}.bias"}, cls
    assert bertkit.BERT(config).pooler is None
    assert {n for n, _ in bertkit.BERTForMaskedLM(config).named_parameters() if not n.startswith("bert.")} == {
        "cls.predictions.bias", "cls.predictions.transform.dense.weight", "cls.predictions.transform.LayerNorm.weight"}


# ---------------------------------------------------------------------------- the layer variant

def test_sliding_window_is_hfs():
    """Keys within ``local_attention // 2`` positions of the query, both sides (HF's overlay, evaluated here)."""
    for length, half in ((20, 4), (9, 4), (5, 4), (7, 1)):
        overlay = sliding_window_bidirectional_overlay(half)
        expected = torch.tensor([[overlay(0, 0, i, j) for j in range(length)] for i in range(length)])
        got = sliding_window_mask(None, length, half, torch.device("cpu"))
        got = torch.ones(length, length, dtype=torch.bool) if got is None else got[0, 0]
        assert torch.equal(got, expected), (length, half)
    padding = torch.tensor([[True] * 3 + [False] * 9])[:, None, None]
    mask = sliding_window_mask(padding, 12, 2, torch.device("cpu"))[0, 0]
    assert mask[0].tolist() == [True] * 3 + [False] * 9 and not bool(mask[11].any())  # far from every real key


def test_first_token_classifier_computes_the_last_layer_at_the_first_token():
    model = randomize(bertkit.BERTForSequenceClassification(our_config(CASES["seq_cls"], "sdpa"))).eval()
    ids, mask = padded_ids(left=False)
    with torch.no_grad():
        seq = model.bert(ids, mask)[0]
        assert model.bert.encode(ids, mask, first_token_only=True).last_hidden_state.shape[1] == 1
        torch.testing.assert_close(model(ids, mask), model.classifier(model.head(seq[:, 0])), **TOL)


@pytest.mark.parametrize("case_id", ["model", "masked_lm", "seq_cls", "seq_cls_mean", "token_cls",
                                     "multiple_choice"])
def test_unpadded_execution_equals_the_padded_path(case_id, monkeypatch):
    """The fast path drops padding for ModernBERT too (attention unpacks to the padded layout of the rotary
    tables and windows) and equals the padded path at every real position, gradients too; the first-token
    classifier's last layer runs at the first tokens alone, packed."""
    plans = []
    real_plan = unpad.plan
    monkeypatch.setattr(unpad, "plan", lambda *a, **k: plans.append(real_plan(*a, **k)) or plans[-1])
    case = CASES[case_id]
    model = randomize(case.ours(our_config(case, "sdpa"))).eval()
    inputs = inputs_for(case)
    mask = inputs["attention_mask"].bool()
    results = []
    for on in (True, False):
        model.zero_grad()
        with fast.fast_path(on):
            out = model(**inputs)
        out = out[0] if isinstance(out, tuple) else out
        out = out[mask] if out.shape[:mask.dim()] == mask.shape else out
        (out * torch.linspace(-1, 1, out.shape[-1])).sum().backward()
        results.append((out.detach(), {n: p.grad.clone() for n, p in model.named_parameters()}))
    assert plans[0] is not None and plans[0].real == int(mask.sum()) and plans[-1] is None
    (fast_out, fast_grads), (plain_out, plain_grads) = results
    torch.testing.assert_close(fast_out, plain_out, **TOL)
    for name, grad in fast_grads.items():
        torch.testing.assert_close(grad, plain_grads[name], **TOL, msg=name)


def test_gradient_checkpointing_gives_the_same_gradients():
    model = randomize(bertkit.BERTForMaskedLM(our_config(CASES["masked_lm"], "sdpa")))
    ids, mask = padded_ids()
    labels = token_labels(dict(attention_mask=mask), SIZES["vocab_size"])
    grads = []
    for checkpointing in (False, True):
        model.zero_grad()
        model.gradient_checkpointing_enable() if checkpointing else model.gradient_checkpointing_disable()
        model.train()
        model.get_loss(labels, ids, mask).backward()
        grads.append({n: p.grad.clone() for n, p in model.named_parameters()})
    for name, grad in grads[0].items():
        torch.testing.assert_close(grads[1][name], grad, **TOL, msg=name)


def test_parameter_counts_are_hfs_and_the_built_models():
    for config in (bertkit.ModernBERTConfig(num_hidden_layers=2, vocab_size=1000),
                   our_config(CASES["seq_cls"], "sdpa", **BIASES)):
        for cls in (bertkit.BERT, bertkit.BERTForMaskedLM, bertkit.BERTForSequenceClassification,
                    bertkit.BERTForMultipleChoice, bertkit.BERTForTokenClassification,
                    bertkit.BERTForQuestionAnswering):
            assert count_parameters(config, cls.hf_architecture) == cls(config).num_parameters(), cls
    base = bertkit.ModernBERTConfig()
    assert count_parameters(base, "BertForMaskedLM") == 149_655_232  # ModernBERT-base, as HF builds it
    assert count_parameters(base, "BertModel") == 149_014_272


# ---------------------------------------------------------------------------- configuration

def test_factory_and_special_ids():
    config = bertkit.ModernBERTConfig()
    assert (config.family, config.vocab_size, config.num_hidden_layers, config.intermediate_size,
            config.max_position_embeddings, config.layer_norm_eps) == ("modernbert", 50368, 22, 1152, 8192, 1e-5)
    assert (config.pad_token_id, config.cls_token_id, config.sep_token_id, config.unk_token_id,
            config.mask_token_id) == (50283, 50281, 50282, 50280, 50284)
    assert not (config.attention_bias or config.mlp_bias or config.norm_bias or config.classifier_bias)
    assert (config.global_attn_every_n_layers, config.local_attention, config.global_rope_theta,
            config.local_rope_theta, config.classifier_pooling) == (3, 128, 160_000.0, 10_000.0, "cls")
    assert bertkit.models.ModernBERTConfig is bertkit.ModernBERTConfig
    assert BERTConfig.from_dict(config.to_dict()) == config
    assert BERTConfig.from_hf_dict(config.to_hf_dict("BertForMaskedLM")) == config
    assert config.to_hf_dict("BertForMaskedLM")["architectures"] == ["ModernBertForMaskedLM"]
    hf = transformers.ModernBertConfig()  # HF's defaults are the factory's
    assert BERTConfig.from_hf_dict(hf.to_dict()) == config


def test_configs_of_older_transformers_and_missing_keys_read_as_hf_does():
    """transformers 4.x wrote global_rope_theta / local_rope_theta / global_attn_every_n_layers (no
    rope_parameters or layer_types), and hub configs leave keys out: HF's defaults fill them."""
    old = {"model_type": "modernbert", "global_rope_theta": 1000.0, "local_rope_theta": 100.0,
           "global_attn_every_n_layers": 2, "num_hidden_layers": 5, "layer_norm_eps": 1e-12, "norm_eps": 1e-6,
           "position_embedding_type": "absolute", "reference_compile": True, "sparse_prediction": False}
    config = BERTConfig.from_hf_dict(old)
    assert (config.global_rope_theta, config.local_rope_theta, config.global_attn_every_n_layers) == (1000.0, 100.0, 2)
    assert config.layer_norm_eps == 1e-6  # norm_eps is ModernBERT's; layer_norm_eps is no key of its config
    assert (config.vocab_size, config.intermediate_size, config.mlp_bias, config.hidden_dropout_prob) == \
        (50368, 1152, False, 0.0)
    hf = transformers.ModernBertConfig(**{k: v for k, v in old.items() if k != "model_type"})
    assert BERTConfig.from_hf_dict(hf.to_dict()) == config


@pytest.mark.parametrize(("changes", "message"), [
    (dict(layer_types=["full_attention", "sliding_attention", "full_attention", "full_attention"]),
     "not global attention every n layers"),
    (dict(layer_types=["full_attention"] * 3), "names 3 layers but num_hidden_layers is 4"),
    (dict(rope_parameters={"full_attention": {"rope_type": "linear", "factor": 2.0, "rope_theta": 10.0}}),
     "rope_parameters.full_attention.rope_type='linear' is not supported"),
    (dict(rope_parameters={"full_attention": {"rope_theta": "big"}}),
     "rope_parameters.full_attention.rope_theta must be a number"),
    (dict(decoder_bias=False), "decoder_bias=false"),
    (dict(classifier_pooling="max"), "classifier_pooling must be one of ('cls', 'mean')"),
    (dict(norm_eps="1e-5"), "norm_eps must be a number"),
])
def test_what_bertkit_does_not_build_is_refused_by_name(changes, message):
    d = {**transformers.ModernBertConfig(num_hidden_layers=4).to_dict(), **changes}
    with pytest.raises(ValueError, match=re.escape(message)):
        BERTConfig.from_hf_dict(d)


def test_bert_configs_are_as_before_and_refuse_modernberts_options():
    bert = BERTConfig(vocab_size=99, hidden_size=36, num_attention_heads=3, num_hidden_layers=2, intermediate_size=52)
    for key in ("norm_bias", "mlp_bias", "local_attention", "global_rope_theta", "classifier_pooling"):
        assert key not in bert.to_dict() and key not in bert.to_hf_dict("BertModel")
    assert "position_embedding_type" in bert.to_hf_dict("BertModel")
    with pytest.raises(ValueError, match=r"BERTConfig.norm_bias=False has no equivalent in HF's Bert config"):
        bert.replace(norm_bias=False).to_hf_dict("BertModel")
    model = bertkit.BERTForSequenceClassification(bert)
    assert model.bert.pooler is not None and model.bert.embeddings.LayerNorm.bias is not None


@pytest.mark.parametrize("changes", [dict(is_decoder=True), dict(chunk_size_feed_forward=4)])
def test_decoder_options_are_refused_when_building(changes):
    name = next(iter(changes))
    with pytest.raises(ValueError, match=f"BERTConfig.{name}=.* is not supported by family 'modernbert'"):
        bertkit.BERT(our_config(CASES["model"], "sdpa", **changes))
    with pytest.raises(ValueError, match="family 'modernbert' does not have"):
        bertkit.BERTForPreTraining(our_config(CASES["model"], "sdpa"))
