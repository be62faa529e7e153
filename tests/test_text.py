"""Text entry points of the heads: get_loss_from_text (lucid's signature), fill_mask, answer, classify_text."""

import inspect

import pytest
import torch

import bertkit
from bertkit import BERTTokenizerFast
from bertkit.compat.d2l import get_tokens_and_segments
from bertkit.resources import BERT_BASE_UNCASED_VOCAB
from conftest import randomize_


@pytest.fixture(scope="module")
def tokenizer():
    return BERTTokenizerFast(BERT_BASE_UNCASED_VOCAB)


def tiny(factory, **overrides):
    return randomize_(factory(**overrides), std=0.05).eval()


def test_get_loss_from_text_signature_is_lucids():
    params = inspect.signature(bertkit.BERTForPreTraining.get_loss_from_text).parameters
    expected = {"tokenizer": inspect.Parameter.empty, "text_a": inspect.Parameter.empty, "text_b": None,
                "nsp_label": 0, "device": "cpu", "mask_token_id": None, "mlm_probability": 0.15,
                "mask_replace_prob": 0.8, "random_replace_prob": 0.1, "ignore_index": -100, "reduction": "mean",
                "mlm_weight": 1.0, "nsp_weight": 1.0}
    assert {k: v.default for k, v in params.items() if k != "self"} == expected


def test_get_loss_from_text_equals_the_manual_pipeline(tokenizer):
    model = tiny(bertkit.bert_for_pre_training_tiny)
    a, b = "Machine learning helps us build useful systems.", "Tokenization quality strongly affects models."
    torch.manual_seed(3)
    loss = model.get_loss_from_text(tokenizer, a, b, nsp_label=1, mlm_probability=0.5)
    torch.manual_seed(3)
    enc = tokenizer([a], [b], return_special_tokens_mask=True, return_tensors="pt")
    masked, labels = model.create_masked_lm_inputs(enc["input_ids"], enc["attention_mask"],
                                                   enc["special_tokens_mask"], mlm_probability=0.5)
    expected = model.get_loss(labels, torch.tensor([1]), masked, enc["attention_mask"], enc["token_type_ids"])
    torch.testing.assert_close(loss, expected)
    assert (labels != -100).any()
    assert not labels[enc["special_tokens_mask"].bool()].ne(-100).any()


def test_get_loss_from_text_rejects_a_larger_tokenizer(tokenizer):
    with pytest.raises(ValueError, match="tokenizer"):
        bertkit.bert_for_pre_training_tiny(vocab_size=1000).get_loss_from_text(tokenizer, "hello")


@pytest.mark.skipif(torch.cuda.is_available() or torch.backends.mps.is_available(), reason="a GPU is present")
def test_gpu_device_without_a_gpu_is_a_clear_error(tokenizer):
    model = bertkit.bert_for_pre_training_tiny()
    with pytest.raises(ValueError, match="no GPU"):
        model.get_loss_from_text(tokenizer, "hello", device="gpu")
    with pytest.raises(ValueError, match="no GPU"):
        model.to("gpu")


@pytest.mark.parametrize("factory", [bertkit.bert_for_masked_lm_tiny, bertkit.bert_for_pre_training_tiny])
def test_fill_mask_ranks_the_vocabulary_at_each_mask(tokenizer, factory):
    model = tiny(factory)
    text = "the [MASK] sat on the [MASK] ."
    results = model.fill_mask(tokenizer, text, top_k=4)
    assert len(results) == 2 and all(len(r) == 4 for r in results)
    enc = tokenizer(text, return_tensors="pt")
    with torch.no_grad():
        scores = model(enc["input_ids"], enc["attention_mask"])  # one text with tensors: [1, L], as HF
    scores = (scores[0] if isinstance(scores, tuple) else scores)[0]
    positions = (enc["input_ids"][0] == tokenizer.mask_token_id).nonzero().squeeze(1)
    for result, pos in zip(results, positions):
        probs = [p for _, p in result]
        assert probs == sorted(probs, reverse=True)
        top = scores[pos].softmax(-1).topk(4)
        assert [t for t, _ in result] == tokenizer.convert_ids_to_tokens(top.indices.tolist())
        torch.testing.assert_close(torch.tensor(probs), top.values)
    with pytest.raises(ValueError, match="MASK"):
        model.fill_mask(tokenizer, "no mask here")


def test_answer_finds_the_best_span_across_windows(tokenizer):
    model = tiny(bertkit.bert_for_question_answering_tiny)
    context = " ".join(f"sentence number {i} says something about emma ." for i in range(40))
    question = "what does emma say?"
    result = model.answer(tokenizer, question, context, max_length=64, stride=16, max_answer_length=5)
    assert context[result["start"]:result["end"]] == result["answer"] and result["answer"]
    # the best score over windows equals the best over each window scored on its own
    enc = tokenizer(question, context, truncation="only_second", max_length=64, stride=16,
                    return_overflowing_tokens=True, padding=True, return_tensors="pt")
    with torch.no_grad():
        start, end = model(enc["input_ids"], enc["attention_mask"], enc["token_type_ids"])
    best = -float("inf")
    for row in range(len(start)):
        ctx = [s == 1 for s in enc.sequence_ids(row)]
        for i in range(start.shape[1]):
            for j in range(i, min(i + 5, start.shape[1])):
                if ctx[i] and ctx[j]:
                    best = max(best, float(start[row, i] + end[row, j]))
    assert result["score"] == pytest.approx(best, abs=1e-5)


def test_answer_decodes_with_the_span_decoder_of_the_pipeline_and_the_server(tokenizer):
    """One QA span decoder: the head's answer() is nbest_spans' best span over the same windows' logits (its score
    the float64 sum of the two float32 logits, as every other answer bertkit gives)."""
    from bertkit.modeling.spans import nbest_spans
    from bertkit.tasks.question_answering import nbest_spans as tasks_nbest_spans

    assert tasks_nbest_spans is nbest_spans
    model = tiny(bertkit.bert_for_question_answering_tiny)
    context = " ".join(f"sentence number {i} says something about emma ." for i in range(40))
    question = "what does emma say?"
    result = model.answer(tokenizer, question, context, max_length=64, stride=16, max_answer_length=5)
    enc = tokenizer(question, context, truncation="only_second", max_length=64, stride=16,
                    return_overflowing_tokens=True, return_offsets_mapping=True, padding=True, return_tensors="pt")
    with torch.no_grad():
        start, end = model(enc["input_ids"], enc["attention_mask"], enc["token_type_ids"])
    offsets = [[tuple(o) if s == 1 else None for o, s in zip(enc["offset_mapping"][i].tolist(), enc.sequence_ids(i))]
               for i in range(len(start))]
    best = nbest_spans(start.numpy(), end.numpy(), offsets, n_best_size=1, max_answer_length=5)[0]
    assert result == {"answer": context[best.start:best.end], "start": best.start, "end": best.end,
                      "score": best.score}


def test_answer_cuts_a_long_question_to_max_question_length(tokenizer):
    model = tiny(bertkit.bert_for_question_answering_tiny)
    context = " ".join(f"sentence number {i} says something about emma ." for i in range(40))
    long_question = "who " * 300 + "is it?"  # 303 tokens: more than max_length - stride leaves
    result = model.answer(tokenizer, long_question, context)
    assert result == model.answer(tokenizer, "who " * 64, context)  # its first 64 tokens (max_question_length)
    assert context[result["start"]:result["end"]] == result["answer"]
    assert model.answer(tokenizer, long_question, context, max_question_length=4) == \
        model.answer(tokenizer, "who who who who", context)


def test_answer_errors_name_the_arguments(tokenizer):
    model = tiny(bertkit.bert_for_question_answering_tiny)
    with pytest.raises(ValueError, match=r"max_length=64 - 3 special tokens - 50 question tokens \(at most "
                                         r"max_question_length=64\) leaves 11 context tokens per window, which must "
                                         r"be more than stride=16"):
        model.answer(tokenizer, "who " * 50, "some context", max_length=64, stride=16)
    with pytest.raises(ValueError, match="context has no tokens"):
        model.answer(tokenizer, "who?", "  \n ")
    with pytest.raises(ValueError, match="max_answer_length must be an integer >= 1, got max_answer_length=0"):
        model.answer(tokenizer, "who?", "emma", max_answer_length=0)


def test_fill_mask_says_where_a_cut_off_mask_is(tokenizer):
    model = tiny(bertkit.bert_for_masked_lm_tiny)
    limit = model.config.max_position_embeddings
    text = "word " * (limit + 10) + "[MASK] ."
    with pytest.raises(ValueError, match=rf"the \[MASK\] at character {5 * (limit + 10)} \(token {limit + 11}\) "
                                         rf"of text lies beyond max_length={limit} tokens.*\({limit + 14} tokens\).*"
                                         rf"shorter text, with each \[MASK\] among its first {limit - 2} tokens"):
        model.fill_mask(tokenizer, text)
    with pytest.raises(ValueError, match=rf"token {limit + 12}"):  # one mask kept, the other cut off
        model.fill_mask(tokenizer, "[MASK] " + text)
    assert len(model.fill_mask(tokenizer, "[MASK] " + "word " * (limit - 3))) == 1  # the longest that fits


def test_classify_text_uses_label_names(tokenizer):
    model = tiny(bertkit.bert_for_sequence_classification_tiny, num_labels=3,
                 id2label={0: "negative", 1: "neutral", 2: "positive"})
    out = model.classify_text(tokenizer, ["a fine day", "a dreadful, wretched evening"])
    assert len(out) == 2 and all(o["label"] in {"negative", "neutral", "positive"} for o in out)
    enc = tokenizer(["a fine day", "a dreadful, wretched evening"], padding=True, return_tensors="pt")
    with torch.no_grad():
        probs = model(enc["input_ids"], enc["attention_mask"]).softmax(-1)
    torch.testing.assert_close(torch.tensor([o["score"] for o in out]), probs.max(-1).values)


def test_d2l_tokens_and_segments():
    tokens, segments = get_tokens_and_segments(["a", "b"], ["c"])
    assert tokens == ["<cls>", "a", "b", "<sep>", "c", "<sep>"]
    assert segments == [0, 0, 0, 0, 1, 1]
    assert get_tokens_and_segments(["x"]) == (["<cls>", "x", "<sep>"], [0, 0, 0])


def test_tokenizer_cli_trains_and_encodes(tmp_path, capsys):
    from bertkit.cli import main
    from bertkit.resources import austen_novels

    corpus = tmp_path / "persuasion.txt"
    corpus.write_text(austen_novels()["persuasion"][:200_000], encoding="utf-8")
    assert main(["tokenizer", "train", str(corpus), "--vocab-size", "800", "-o", str(tmp_path / "tok")]) == 0
    trained = BERTTokenizerFast.from_pretrained(tmp_path / "tok")
    assert trained.vocab_size <= 800 and trained.pad_token_id == 0
    capsys.readouterr()
    assert main(["tokenizer", "encode", str(tmp_path / "tok"), "Anne Elliot walked."]) == 0
    tokens, ids = capsys.readouterr().out.splitlines()
    assert tokens.startswith("[CLS] anne") and tokens.endswith("[SEP]")
    assert ids.split() == [str(i) for i in trained.encode("Anne Elliot walked.")]
