"""The guide model of GIST training (:class:`~bertkit.sentence.losses.distillation.GISTEmbedLoss`): a frozen embedding
model called, like the student, on a column's tokenized inputs.

A guide whose tokenizer has the student's vocabulary reads the student's token ids as they are. Any other guide
(another family, another vocabulary) gets the texts back: each row's ids are decoded with the student's
tokenizer (special tokens and padding left out) and tokenized again with the guide's own, cut at the guide's
``max_seq_length``, as sentence-transformers' ``GISTEmbedLoss`` does. The decoded text is the student's view
of it (an uncased student's guide sees lower case; a prompt the student was given is part of the text).
"""

from __future__ import annotations

import os
from collections.abc import Mapping

import torch
from torch import nn


class Guide:
    """``guide(inputs) -> [n, d]`` embeddings of the frozen ``model`` (a :class:`~bertkit.sentence.SentenceTransformer`)
    for the student's tokenized ``inputs``; ``student_tokenizer`` decodes them where the vocabularies differ
    (:attr:`retokenize`). The guide is put in eval mode with its parameters frozen; it is not a submodule
    of the loss, so it is neither trained nor saved in a checkpoint."""

    def __init__(self, model: nn.Module, student_tokenizer):
        self.model = model.eval().requires_grad_(False)
        self.student_tokenizer = student_tokenizer
        self.retokenize = model.tokenizer.get_vocab() != student_tokenizer.get_vocab()

    def __call__(self, inputs: Mapping[str, torch.Tensor]) -> torch.Tensor:
        device = inputs["input_ids"].device
        if self.model.device != device:  # the trainer moved the student; the guide follows
            self.model.to(device)
        if self.retokenize:
            texts = self.student_tokenizer.batch_decode(inputs["input_ids"].tolist(), skip_special_tokens=True)
            inputs = self.model.tokenizer(texts, padding=True, truncation=True, max_length=self.model.max_seq_length,
                                          return_tensors="pt")
        inputs = {key: value.to(device) for key, value in inputs.items()}
        with torch.no_grad():
            return self.model(inputs["input_ids"], inputs["attention_mask"], inputs.get("token_type_ids"))


def load_guide(source: str | os.PathLike, student_tokenizer) -> Guide:
    """The :class:`Guide` of the embedding model at ``source`` (a sentence-transformers directory, or any
    checkpoint bertkit loads, mean-pooled); one it cannot load, or a cross-encoder (which embeds nothing), is
    refused naming ``--guide``."""
    from bertkit.sentence import SentenceTransformer
    from bertkit.sentence.cross_encoder import is_cross_encoder

    if is_cross_encoder(source):
        raise ValueError(f"--guide {os.fspath(source)} is a cross-encoder (a reranker): it scores (query, passage) "
                         "pairs and was never trained to embed texts, so the similarities that drop false negatives "
                         "would mean nothing. Give an embedding model (a sentence-transformers directory).")
    try:
        model = SentenceTransformer(source, optimize=False)
    except (OSError, ValueError) as error:
        raise ValueError(f"--guide {os.fspath(source)}: {error}") from None
    return Guide(model, student_tokenizer)
