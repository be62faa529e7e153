"""Jina embeddings v3 as a family of the one engine (``BERTConfig(family="jina_embeddings_v3")``): XLM-R's embeddings
(without position embeddings) and heads around post-LN rotary layers (the rotary layer variant with BERT's plain
MLP, q/k/v/o biases).

Parity with HF transformers' ``JinaEmbeddingsV3*`` classes (a test-only dependency; no network): random weights are
written by one library's ``save_pretrained`` and read by the other's ``from_pretrained``; outputs, losses and
gradients must agree at every real position of a padded batch (right- and left-padded rows), with eager and SDPA
attention, on the fast and the plain engine path. The task adapters of the original layout: the model loaded with
``task=`` equals the adapters applied unmerged, and written as HF's port it loads in ``JinaEmbeddingsV3Model``.
"""

from __future__ import annotations

import json

import pytest
import torch

pytest.importorskip("transformers")

import transformers

import bertkit
from bertkit.config import BERTConfig
from bertkit.modeling import fast
from bertkit.modeling.counting import count_parameters
from bertkit.weights.convert import convert
from conftest import randomize_
from family_parity import (
    IMPLEMENTATIONS,
    TOL,
    Case,
    FamilySetup,
    check_fast_and_plain_paths_agree,
    check_hf_checkpoint,
    check_our_checkpoint,
    hf_from_pretrained,
    inputs_for,
    padded_ids,
    qa_labels,
    token_labels,
)
from jina_original import INSTRUCTIONS, TASKS, unmerged_hooks, write_original

transformers.logging.set_verbosity_error()
transformers.utils.logging.disable_progress_bar()

PAD = 1
#: odd sizes (hidden 36 / 3 heads, inner 26, vocab 99), a theta other than the default, one token type as released
SIZES = dict(vocab_size=99, hidden_size=36, num_hidden_layers=2, num_attention_heads=3, intermediate_size=26,
             max_position_embeddings=64, type_vocab_size=1, layer_norm_eps=1e-5, pad_token_id=PAD)
HF_SIZES = dict(SIZES, rope_parameters={"rope_type": "default", "rope_theta": 500.0}, bos_token_id=0, eos_token_id=2)
JINA = FamilySetup("jina_embeddings_v3", transformers.JinaEmbeddingsV3Config, ours=dict(SIZES, rope_theta=500.0),
                   hf=HF_SIZES, pad=PAD, type_vocab_size=1, hf_checkpoint_layout=True)


def both(**fields) -> dict:
    return dict(config=fields, hf_config=fields)


CASES = {c.id: c for c in (
    Case("model", bertkit.BERT, "JinaEmbeddingsV3Model", outputs=("last_hidden_state", "pooler_output"),
         token_level=(True, False)),
    Case("masked_lm", bertkit.BERTForMaskedLM, "JinaEmbeddingsV3ForMaskedLM", token_level=(True,),
         labels=lambda f, x: dict(labels=token_labels(x, f.vocab_size))),
    Case("seq_cls", bertkit.BERTForSequenceClassification, "JinaEmbeddingsV3ForSequenceClassification",
         **both(num_labels=3), labels=lambda f, x: dict(labels=torch.tensor([2, 0, 1]))),
    Case("seq_cls_regression", bertkit.BERTForSequenceClassification, "JinaEmbeddingsV3ForSequenceClassification",
         **both(num_labels=1), labels=lambda f, x: dict(labels=torch.tensor([0.5, -1.0, 2.0]))),
    Case("token_cls", bertkit.BERTForTokenClassification, "JinaEmbeddingsV3ForTokenClassification",
         **both(num_labels=5), token_level=(True,), labels=lambda f, x: dict(labels=token_labels(x, 5))),
    Case("qa", bertkit.BERTForQuestionAnswering, "JinaEmbeddingsV3ForQuestionAnswering",
         outputs=("start_logits", "end_logits"), token_level=(True, True), labels=qa_labels),
)}


# ---------------------------------------------------------------------------- HF checkpoints in bertkit, and back

@pytest.mark.usefixtures("engine_path")  # the fast (unpadded) and the plain path
@pytest.mark.parametrize("impl", IMPLEMENTATIONS)
@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_hf_jina_checkpoint_matches_hf(case, impl, tmp_path):
    ours, _ = check_hf_checkpoint(JINA, case, impl, tmp_path)
    assert ours.config.rope_theta == 500.0 and ours.config.type_vocab_size == 1


@pytest.mark.usefixtures("engine_path")
@pytest.mark.parametrize("impl", IMPLEMENTATIONS)
@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_our_jina_checkpoint_loads_in_hf(case, impl, tmp_path):
    check_our_checkpoint(JINA, case, impl, tmp_path)
    written = json.loads((tmp_path / "config.json").read_text())
    assert written["rope_parameters"]["rope_theta"] == 500.0
    assert (written["pad_token_id"], written["bos_token_id"], written["eos_token_id"]) == (PAD, 0, 2)


def test_untied_mlm_head_both_ways(tmp_path):
    case = CASES["masked_lm"]
    hf = randomize_(transformers.JinaEmbeddingsV3ForMaskedLM(JINA.hf_config(case, "sdpa", tie_word_embeddings=False)),
                    std=0.1).eval()
    hf.save_pretrained(tmp_path / "hf")
    ours = bertkit.BERTForMaskedLM.from_pretrained(tmp_path / "hf")
    assert not ours.config.tie_word_embedding and ours.load_report.initialized == []
    ours.save_pretrained(tmp_path / "ours")
    again = hf_from_pretrained(transformers.JinaEmbeddingsV3ForMaskedLM, tmp_path / "ours", "sdpa")
    inputs = inputs_for(JINA)
    mask = inputs["attention_mask"].bool()
    with torch.no_grad():
        want = hf(**inputs).logits[mask]
        torch.testing.assert_close(ours(**inputs)[mask], want, **TOL)
        torch.testing.assert_close(again(**inputs).logits[mask], want, **TOL)


def test_factory_has_hfs_defaults():
    config = bertkit.JinaEmbeddingsV3Config()
    hf = transformers.JinaEmbeddingsV3Config()
    assert config.family == "jina_embeddings_v3"
    for name in ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size",
                 "max_position_embeddings", "type_vocab_size", "layer_norm_eps", "pad_token_id"):
        assert getattr(config, name) == getattr(hf, name), name
    assert config.rope_theta == hf.rope_parameters["rope_theta"] == 20000.0
    assert bertkit.JinaEmbeddingsV3Config(hidden_size=48, num_attention_heads=4).hidden_size == 48


@pytest.mark.parametrize("case_id", ["model", "seq_cls"])
def test_fast_and_plain_paths_agree(case_id, monkeypatch):
    """Unpadded execution (the packed tokens through the rotary layers) equals the padded one, gradients too (the
    first-token classifier: the full and right-padded rows, since it keeps a left-padded batch padded)."""
    config = JINA.our_config(CASES[case_id], "sdpa")
    model = bertkit.BERT(config, add_pooling_layer=False) if case_id == "model" else CASES[case_id].ours(config)
    model = randomize_(model, std=0.1).eval()
    ids, mask = padded_ids(JINA)
    if case_id == "seq_cls":
        ids, mask = ids[:2], mask[:2]
    if case_id == "model":
        forward = model.forward
        monkeypatch.setattr(model, "forward", lambda i, m: forward(input_ids=i, attention_mask=m)[0])
    check_fast_and_plain_paths_agree(model, ids, mask, monkeypatch)


# ---------------------------------------------------------------------------- the task adapters

def _port(seed: int = 0):
    config = transformers.JinaEmbeddingsV3Config(**HF_SIZES, attn_implementation="eager")
    return randomize_(transformers.JinaEmbeddingsV3Model(config), seed=seed, std=0.1).eval()


@pytest.mark.parametrize("task", ["retrieval.passage", "classification", None])
def test_task_merged_at_load_equals_the_unmerged_adapters(task, tmp_path):
    hf = _port()
    state = write_original(tmp_path / "original", hf, rank=4, alpha=3.0)
    ours = bertkit.AutoModel.from_pretrained(tmp_path / "original", task=task)
    assert type(ours) is bertkit.BERT and ours.config.family == "jina_embeddings_v3"
    handles = [] if task is None else unmerged_hooks(hf, state, task, 3.0 / 4)
    ids, mask = padded_ids(JINA)
    with torch.no_grad():
        got, want = ours(ids, mask), hf(ids, mask)
    for handle in handles:
        handle.remove()
    torch.testing.assert_close(got[0][mask.bool()], want.last_hidden_state[mask.bool()], **TOL)
    torch.testing.assert_close(got[1][mask[:, 0].bool()], want.pooler_output[mask[:, 0].bool()], **TOL)


def test_merged_task_written_as_hfs_port_loads_in_hf(tmp_path):
    hf = _port()
    state = write_original(tmp_path / "original", hf)
    convert(tmp_path / "original", tmp_path / "port", task="separation")
    written = json.loads((tmp_path / "port" / "config.json").read_text())
    assert written["model_type"] == "jina_embeddings_v3" and "lora_adaptations" not in written
    port = hf_from_pretrained(transformers.JinaEmbeddingsV3Model, tmp_path / "port", "eager")
    ours = bertkit.BERT.from_pretrained(tmp_path / "original", task="separation")
    handles = unmerged_hooks(hf, state, "separation", 1.0 / 4)
    ids, mask = padded_ids(JINA)
    with torch.no_grad():
        got, want, again = ours(ids, mask)[0], hf(ids, mask).last_hidden_state, port(ids, mask).last_hidden_state
    for handle in handles:
        handle.remove()
    m = mask.bool()
    torch.testing.assert_close(got[m], want[m], **TOL)
    torch.testing.assert_close(again[m], want[m], **TOL)


@pytest.fixture(scope="module")
def jina_st(tmp_path_factory):
    """Jina's own sentence-transformers directory in the original layout: its custom Transformer module at the
    root, mean pooling, Normalize, prompts keyed by task."""
    root = tmp_path_factory.mktemp("jina-st")
    write_original(root, _port())
    _write_tokenizer(root)
    (root / "modules.json").write_text(json.dumps([
        {"idx": 0, "name": "transformer", "path": "", "type": "custom_st.Transformer"},
        {"idx": 1, "name": "pooler", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
        {"idx": 2, "name": "normalizer", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"}]))
    (root / "1_Pooling").mkdir()
    (root / "1_Pooling" / "config.json").write_text(json.dumps(
        {"word_embedding_dimension": 36, "pooling_mode_mean_tokens": True}))
    (root / "2_Normalize").mkdir()
    (root / "config_sentence_transformers.json").write_text(json.dumps(
        {"prompts": INSTRUCTIONS, "default_prompt_name": None, "similarity_fn_name": "cosine"}))
    return root


def test_sentence_transformer_with_a_task(jina_st):
    tmp_path = jina_st
    model = bertkit.SentenceTransformer(tmp_path, dtype="fp32", task="retrieval.query")
    assert model.default_prompt_name == "retrieval.query" and model.prompt() == INSTRUCTIONS["retrieval.query"]
    plain = bertkit.SentenceTransformer(tmp_path, dtype="fp32")
    assert plain.prompt() == ""
    text = "the cat sat"
    by_task = model.encode(text)
    by_hand = bertkit.SentenceTransformer(tmp_path, dtype="fp32", task="retrieval.query").encode(
        INSTRUCTIONS["retrieval.query"] + text, prompt="")
    torch.testing.assert_close(torch.as_tensor(by_task), torch.as_tensor(by_hand), **TOL)
    assert not torch.allclose(torch.as_tensor(by_task), torch.as_tensor(plain.encode(text, prompt="")), atol=1e-3)
    with pytest.raises(ValueError, match="task='query' is not one of the task adapters"):
        bertkit.SentenceTransformer(tmp_path, task="query")


def _write_tokenizer(directory) -> None:
    """A tiny XLM-R-style tokenizer (``<s>``, ``<pad>``, ``</s>``, ``<unk>`` at 0-3) of the model's 99 ids."""
    from tokenizers import Tokenizer, models, pre_tokenizers, processors

    vocab = [("<s>", 0.0), ("<pad>", 0.0), ("</s>", 0.0), ("<unk>", 0.0)] + \
        [(f"▁{w}", -1.0) for w in ("the", "cat", "sat", "on", "mat", "a", "dog")] + \
        [(chr(c), -5.0) for c in range(ord("a"), ord("a") + 26)] + [("▁", -3.0)]
    vocab += [(f"<extra_{i}>", -9.0) for i in range(99 - 1 - len(vocab))] + [("<mask>", 0.0)]
    tok = Tokenizer(models.Unigram(vocab, unk_id=3))
    tok.pre_tokenizer = pre_tokenizers.Metaspace()
    tok.post_processor = processors.TemplateProcessing(single="<s> $A </s>", pair="<s> $A </s> </s> $B </s>",
                                                       special_tokens=[("<s>", 0), ("</s>", 2)])
    tok.save(str(directory / "tokenizer.json"))
    (directory / "tokenizer_config.json").write_text(json.dumps(
        {"tokenizer_class": "XLMRobertaTokenizer", "bos_token": "<s>", "eos_token": "</s>", "pad_token": "<pad>",
         "unk_token": "<unk>", "mask_token": "<mask>", "cls_token": "<s>", "sep_token": "</s>",
         "model_max_length": 64}))


def test_task_errors_are_one_line(tmp_path):
    write_original(tmp_path / "original", _port())
    with pytest.raises(ValueError) as e:
        bertkit.AutoModel.from_pretrained(tmp_path / "original", task="retrieval")
    assert str(e.value).count("\n") == 0 and all(t in str(e.value) for t in TASKS)
    randomize_(bertkit.BERT(JINA.our_config(CASES["model"], "sdpa"))).save_pretrained(tmp_path / "port")
    with pytest.raises(ValueError, match="has no task adapters") as e:
        bertkit.BERT.from_pretrained(tmp_path / "port", task="retrieval.query")
    assert str(e.value).count("\n") == 0


def test_fast_path_off_still_matches(tmp_path):
    hf = _port()
    write_original(tmp_path, hf)
    ours = bertkit.BERT.from_pretrained(tmp_path)
    ids, mask = padded_ids(JINA)
    with torch.no_grad(), fast.fast_path(False):
        torch.testing.assert_close(ours(ids, mask)[0][mask.bool()], hf(ids, mask).last_hidden_state[mask.bool()],
                                   **TOL)


def test_embed_cli_and_pipeline_take_the_task(jina_st, tmp_path, capsys):
    import numpy as np

    from bertkit.cli import main

    (tmp_path / "texts.txt").write_text("the cat sat\na dog\n")
    assert main(["embed", str(jina_st), "--task", "retrieval.passage", "--input", str(tmp_path / "texts.txt"),
                 "-o", str(tmp_path / "out.npy")]) == 0
    model = bertkit.SentenceTransformer(jina_st, dtype="fp32", task="retrieval.passage")
    want = model.encode(["the cat sat", "a dog"])
    np.testing.assert_allclose(np.load(tmp_path / "out.npy"), want, atol=2e-5)
    pipe = bertkit.pipeline("embeddings", model=jina_st, dtype="fp32", adapter="retrieval.passage")
    np.testing.assert_allclose(np.asarray(pipe("a dog")), want[1], atol=2e-5)
    assert main(["embed", str(jina_st), "--task", "separation", "--input", str(tmp_path / "texts.txt"),
                 "-o", str(tmp_path / "store")]) == 1
    assert "--task goes with -o OUT.npy" in capsys.readouterr().err


def test_server_merges_its_adapter_at_start(jina_st):
    from fastapi.testclient import TestClient

    from bertkit.serving.app import create_app

    model = bertkit.SentenceTransformer(jina_st, dtype="fp32", task="retrieval.query")
    with TestClient(create_app(jina_st, adapter="retrieval.query", dtype="fp32")) as client:
        got = client.post("/embed", json={"inputs": ["the cat sat"]}).json()
    torch.testing.assert_close(torch.tensor(got[0]), torch.as_tensor(model.encode("the cat sat")), **TOL)
    with pytest.raises(ValueError, match="task='query' is not one of the task adapters"):
        create_app(jina_st, adapter="query")


def test_fill_mask_top5_equals_hfs_pipeline(tmp_path):
    """bertkit's fill-mask pipeline over an HF-written Jina masked LM (an XLM-R-style Unigram tokenizer) gives HF's
    pipeline's top 5."""
    hf = randomize_(transformers.JinaEmbeddingsV3ForMaskedLM(JINA.hf_config(CASES["masked_lm"], "eager")),
                    std=0.3).eval()
    hf.save_pretrained(tmp_path)
    _write_tokenizer(tmp_path)
    text = "the cat <mask> on the mat"
    theirs = transformers.pipeline("fill-mask", model=str(tmp_path), top_k=5)(text)
    ours = bertkit.pipeline("fill-mask", model=tmp_path, dtype="fp32")(text, top_k=5)
    assert [r["token"] for r in ours] == [r["token"] for r in theirs]
    for a, b in zip(ours, theirs, strict=True):
        assert a["score"] == pytest.approx(b["score"], abs=2e-5)


def test_config_round_trips_names_and_counts():
    default = BERTConfig.from_hf_dict(transformers.JinaEmbeddingsV3Config().to_dict())
    assert default.replace(use_cache=False) == bertkit.JinaEmbeddingsV3Config()  # HF writes use_cache true
    assert bertkit.models.JinaEmbeddingsV3Config is bertkit.JinaEmbeddingsV3Config
    small = JINA.our_config(CASES["model"], "sdpa")
    written = small.to_hf_dict("BertForMaskedLM")
    assert written["architectures"] == ["JinaEmbeddingsV3ForMaskedLM"] and "rope_theta" not in written
    assert BERTConfig.from_hf_dict(transformers.JinaEmbeddingsV3Config.from_dict(written).to_dict()) == small
    for case in CASES.values():
        built = case.ours(JINA.our_config(case, "sdpa"))
        hf = getattr(transformers, case.hf_class)(JINA.hf_config(case, "eager"))
        count = sum(p.numel() for p in built.parameters())
        assert count_parameters(built.config, case.ours.hf_architecture) == count
        assert count == sum(p.numel() for p in hf.parameters()), case.id


@pytest.mark.parametrize(("make", "message"), [
    (lambda c: bertkit.BERTForPreTraining(c), "family 'jina_embeddings_v3' does not have"),
    (lambda c: c.replace(is_decoder=True), "family 'jina_embeddings_v3' has no causal LM"),
])
def test_what_the_family_lacks_is_refused(make, message):
    with pytest.raises(ValueError, match=message):
        make(JINA.our_config(CASES["model"], "sdpa"))
