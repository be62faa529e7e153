"""Text in, answers out: the helpers behind the heads' text methods.

Each takes a model and a tokenizer (any object with :class:`bertkit.BERTTokenizerFast`'s
``__call__``, ``convert_ids_to_tokens`` and special-token ids; modeling does not import
the tokenizer package) and runs on the model's device.
"""

from __future__ import annotations

from typing import Any

import torch


def resolve_device(device: str | torch.device) -> torch.device:
    """lucid's device names: ``"gpu"`` means CUDA (or Apple's MPS); anything else is torch's own name."""
    if isinstance(device, str) and device.lower() == "gpu":
        if torch.cuda.is_available():
            return torch.device("cuda")
        if torch.backends.mps.is_available():
            return torch.device("mps")
        raise ValueError('device="gpu" was requested but no GPU is available (no CUDA or MPS device); '
                         'use device="cpu".')
    return torch.device(device)


def model_device(model: torch.nn.Module) -> torch.device:
    return next(model.parameters()).device


def encode(model, tokenizer, text: str | list[str], text_pair=None, device=None, **kwargs: Any):
    """Tokenize a batch for ``model`` (truncated to its position limit) as tensors on ``device``."""
    if tokenizer.vocab_size > model.config.vocab_size:
        raise ValueError(f"the tokenizer has {tokenizer.vocab_size} tokens but the model's vocabulary holds "
                         f"{model.config.vocab_size}; use the tokenizer the model was trained with.")
    kwargs.setdefault("truncation", True)
    kwargs.setdefault("max_length", model.config.max_position_embeddings)
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
    """For each mask token in ``text``, the ``top_k`` most likely tokens with their probabilities."""
    enc = encode(model, tokenizer, [text])
    at_mask = enc["input_ids"] == tokenizer.mask_token_id
    if not bool(at_mask.any()):
        raise ValueError(f"text has no {tokenizer.mask_token} token to fill: {text!r:.80}")
    scores = model(enc["input_ids"], enc["attention_mask"], enc["token_type_ids"], pred_positions=at_mask)
    if isinstance(scores, tuple):  # BERTForPreTraining also returns the NSP scores
        scores = scores[0]
    probs, ids = scores.float().softmax(-1).topk(top_k, dim=-1)  # [masks, top_k]
    return [list(zip(tokenizer.convert_ids_to_tokens(row_ids.tolist()), row_probs.tolist()))
            for row_ids, row_probs in zip(ids, probs)]


@torch.no_grad()
def answer(model, tokenizer, question: str, context: str, *, max_answer_length: int = 30, max_length: int = 384,
           stride: int = 128) -> dict[str, Any]:
    """The best span of ``context`` answering ``question``, over sliding windows of the context.

    Returns ``{"answer": str, "start": int, "end": int, "score": float}`` with character offsets.
    """
    from bertkit.modeling.heads import best_spans

    enc = tokenizer([question], [context], truncation="only_second", max_length=max_length, stride=stride,
                    return_overflowing_tokens=True, return_offsets_mapping=True, padding=True, return_tensors="pt")
    device = model_device(model)
    start_logits, end_logits = model(enc["input_ids"].to(device), enc["attention_mask"].to(device),
                                     enc["token_type_ids"].to(device))
    in_context = torch.tensor([[s == 1 for s in enc.sequence_ids(i)] for i in range(len(enc["input_ids"]))],
                              device=device)
    starts, ends = best_spans(start_logits, end_logits, max_answer_length, in_context)
    rows = torch.arange(len(starts), device=device)
    scores = start_logits[rows, starts] + end_logits[rows, ends]
    best = int(scores.argmax())
    offsets = enc["offset_mapping"][best]
    first, last = int(offsets[int(starts[best])][0]), int(offsets[int(ends[best])][1])
    return {"answer": context[first:last], "start": first, "end": last, "score": float(scores[best])}


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
