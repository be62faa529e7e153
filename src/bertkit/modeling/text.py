"""Text in, answers out: the helpers behind the heads' text methods.

Each takes a model and a tokenizer (any object with :class:`bertkit.BERTTokenizerFast`'s
``__call__``, ``convert_ids_to_tokens`` and special-token ids; modeling does not import
the tokenizer package) and runs on the model's device.
"""

from __future__ import annotations

from typing import Any

import torch

from bertkit.checks import check_int
from bertkit.devices import gpu
from bertkit.modeling.spans import nbest_spans


def resolve_device(device: str | torch.device) -> torch.device:
    """lucid's device names: ``"gpu"`` means CUDA (or Apple's MPS); anything else is torch's own name."""
    if isinstance(device, str) and device.lower() == "gpu":
        return gpu()
    return torch.device(device)


def model_device(model: torch.nn.Module) -> torch.device:
    return next(model.parameters()).device


def encode(model, tokenizer, text: str | list[str], text_pair=None, device=None, **kwargs: Any):
    """Tokenize a batch for ``model`` (truncated to its position limit) as tensors on ``device``, with
    ``token_type_ids`` whatever the tokenizer returns by default (all 0 where a family has no types)."""
    if tokenizer.vocab_size > model.config.vocab_size:
        raise ValueError(f"the tokenizer has {tokenizer.vocab_size} tokens but the model's vocabulary holds "
                         f"{model.config.vocab_size}; use the tokenizer the model was trained with.")
    kwargs.setdefault("truncation", True)
    kwargs.setdefault("max_length", model.config.max_tokens)  # RoBERTa: max_position_embeddings - pad - 1
    kwargs.setdefault("return_token_type_ids", True)  # RoBERTa-style tokenizers return none by default
    enc = tokenizer(text, text_pair, padding=True, return_tensors="pt", **kwargs)
    return enc.to(device if device is not None else model_device(model))


def loss_from_text(model, tokenizer, text_a: str, text_b: str | None, *, nsp_label: int, device,
                   mask_token_id: int | None, **loss_and_masking: Any) -> torch.Tensor:
    """BERTForPreTraining.get_loss_from_text: encode the pair, mask it, return the pretraining loss."""
    masking_keys = ("mlm_probability", "mask_replace_prob", "random_replace_prob")
    masking = {k: loss_and_masking.pop(k) for k in masking_keys}
    ignore_index = loss_and_masking["ignore_index"]
    enc = encode(model, tokenizer, [text_a], None if text_b is None else [text_b], device=resolve_device(device),
                 return_special_tokens_mask=True)
    masked, mlm_labels = model.create_masked_lm_inputs(
        enc["input_ids"], enc["attention_mask"], enc["special_tokens_mask"],
        mask_token_id=tokenizer.mask_token_id if mask_token_id is None else mask_token_id,
        ignore_index=ignore_index, **masking)
    nsp_labels = torch.tensor([nsp_label], device=masked.device)
    return model.get_loss(mlm_labels, nsp_labels, masked, enc["attention_mask"], enc["token_type_ids"],
                          **loss_and_masking)


@torch.no_grad()
def fill_mask(model, tokenizer, text: str, top_k: int = 5) -> list[list[tuple[str, float]]]:
    """For each mask token in ``text``, the ``top_k`` most likely tokens with their probabilities.

    The text is read up to the model's ``max_position_embeddings`` tokens. ValueError if it
    holds no mask token, or if a mask token lies beyond that limit (it would be truncated away).
    """
    check_int("top_k", top_k, 1)
    enc = encode(model, tokenizer, [text])
    at_mask = enc["input_ids"] == tokenizer.mask_token_id
    _check_masks_kept(tokenizer, text, int(at_mask.sum()), enc["input_ids"].shape[1])
    scores = model(enc["input_ids"], enc["attention_mask"], enc["token_type_ids"], pred_positions=at_mask)
    if isinstance(scores, tuple):  # BERTForPreTraining also returns the NSP scores
        scores = scores[0]
    probs, ids = scores.float().softmax(-1).topk(min(top_k, scores.shape[-1]), dim=-1)  # [masks, top_k]
    return [list(zip(tokenizer.convert_ids_to_tokens(row_ids.tolist()), row_probs.tolist()))
            for row_ids, row_probs in zip(ids, probs)]


def _check_masks_kept(tokenizer, text: str, kept: int, length: int) -> None:
    """ValueError unless each mask token of ``text`` is among the ``kept`` ones of its truncated encoding
    (``length`` tokens)."""
    mask = tokenizer.mask_token
    full = tokenizer(text, return_offsets_mapping=True)  # not truncated
    positions = [i for i, t in enumerate(full["input_ids"]) if t == tokenizer.mask_token_id]
    if not positions:
        raise ValueError(f"text has no {mask} token to fill: {text!r:.80}. Write {mask} where a word should be "
                         "predicted.")
    if len(positions) > kept:
        token = positions[kept]
        char = full["offset_mapping"][token][0]
        raise ValueError(f"the {mask} at character {char} (token {token}) of text lies beyond max_length={length} "
                         f"tokens, the model's max_position_embeddings, where the text ({len(full['input_ids'])} "
                         f"tokens) is truncated. Use a shorter text, with each {mask} among its first "
                         f"{length - tokenizer.num_special_tokens_to_add()} "
                         "tokens (e.g. only the sentences around it), or a model with a larger "
                         "max_position_embeddings.")


@torch.no_grad()
def answer(model, tokenizer, question: str, context: str, *, max_answer_length: int = 30, max_length: int = 384,
           stride: int = 128, max_question_length: int = 64) -> dict[str, Any]:
    """The best span of ``context`` answering ``question``, over sliding windows of the context.

    Each window holds the question, the special tokens and a stretch of the context, ``max_length``
    tokens in all; consecutive windows share ``stride`` context tokens. A question longer than
    ``max_question_length`` tokens is cut to its first ``max_question_length`` tokens (as HF's
    ``max_query_length``), so that a long question still leaves room for the context. ValueError
    if the windows leave no more than ``stride`` tokens of context, or the context is empty.

    Returns ``{"answer": str, "start": int, "end": int, "score": float}`` with character offsets.
    """
    for name, value, minimum in (("max_answer_length", max_answer_length, 1), ("stride", stride, 0),
                                 ("max_question_length", max_question_length, 1), ("max_length", max_length, 4)):
        check_int(name, value, minimum)
    question, question_tokens = _first_tokens(tokenizer, question, max_question_length)
    specials = tokenizer.num_special_tokens_to_add(True)  # [CLS] q [SEP] c [SEP]; RoBERTa's <s> q </s></s> c </s>
    room = max_length - specials - question_tokens  # context tokens per window
    if room <= stride:
        raise ValueError(f"max_length={max_length} - {specials} special tokens - {question_tokens} question tokens "
                         f"(at most max_question_length={max_question_length}) leaves {room} context tokens per "
                         f"window, which must be more than stride={stride}, the tokens consecutive windows share. "
                         "Use a larger max_length, a smaller stride, or a smaller max_question_length.")
    enc = tokenizer([question], [context], truncation="only_second", max_length=max_length, stride=stride,
                    return_overflowing_tokens=True, return_offsets_mapping=True, padding=True, return_tensors="pt")
    device = model_device(model)
    in_context = [[s == 1 for s in enc.sequence_ids(i)] for i in range(len(enc["input_ids"]))]
    if not any(any(row) for row in in_context):
        raise ValueError(f"context has no tokens to answer from: {context!r:.80}. Pass the text that holds the "
                         "answer.")
    # token types where the tokenizer returns them (BERT's); RoBERTa-style windows are all type 0 (the tokenizers
    # library marks an overflow window's second text as type 1 even where the template says 0)
    types = enc.get("token_type_ids")
    start_logits, end_logits = model(enc["input_ids"].to(device), enc["attention_mask"].to(device),
                                     None if types is None else types.to(device))
    offsets = [[tuple(o) if inside else None for o, inside in zip(window.tolist(), row)]
               for window, row in zip(enc["offset_mapping"], in_context)]
    best = nbest_spans(start_logits.float().cpu().numpy(), end_logits.float().cpu().numpy(), offsets,
                       n_best_size=1, max_answer_length=max_answer_length)[0]  # the pipelines' and the server's
    return {"answer": context[best.start:best.end], "start": best.start, "end": best.end, "score": best.score}


def _first_tokens(tokenizer, text: str, limit: int) -> tuple[str, int]:
    """``text`` cut after its first ``limit`` tokens, and its number of tokens (at most ``limit``).

    The cut falls at the end of a token, and greedy WordPiece tokenizes the shortened text into
    the same first tokens.
    """
    offsets = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)["offset_mapping"]
    if len(offsets) <= limit:
        return text, len(offsets)
    return text[:offsets[limit - 1][1]], limit


@torch.no_grad()
def classify_text(model, tokenizer, text: str | list[str], text_pair=None) -> list[dict[str, Any]]:
    """``[{"label": name, "score": probability}, ...]``, one per text (single-label classifiers)."""
    texts = [text] if isinstance(text, str) else list(text)
    pairs = [text_pair] if isinstance(text_pair, str) else text_pair
    enc = encode(model, tokenizer, texts, pairs)
    probs = model(enc["input_ids"], enc["attention_mask"], enc["token_type_ids"]).float().softmax(-1)
    scores, labels = probs.max(-1)
    names = model.config.id2label or {}
    return [{"label": names.get(int(i), f"LABEL_{int(i)}"), "score": float(s)} for i, s in zip(labels, scores)]
