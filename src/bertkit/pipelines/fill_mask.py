"""``fill-mask``: the most likely tokens for each mask token, as HF's fill-mask pipeline returns them.

One mask: a list of ``{"score", "token", "token_str", "sequence"}`` (best first); several masks: one such
list per mask, in text order (their sequences keep the special tokens, as HF's do). ``targets``
restricts the candidates to the given tokens (a word outside the vocabulary stands for its first piece).
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np
import torch

from bertkit.checks import check_int
from bertkit.modeling.lm_heads import BERTForMaskedLM
from bertkit.pipelines.base import Pipeline


class FillMaskPipeline(Pipeline):
    task = "fill-mask"
    model_class = BERTForMaskedLM
    defaults: ClassVar[dict[str, Any]] = {"top_k": 5, "targets": None}

    def check(self, params: dict[str, Any]) -> dict[str, Any]:
        params = super().check(params)
        check_int("top_k", params["top_k"])
        return params

    def preprocess(self, item: str, params: dict[str, Any]) -> list[dict[str, Any]]:
        feature = self.encode(item, params=params)
        if self.tokenizer.mask_token_id not in feature["input_ids"]:
            raise ValueError(f"fill-mask input holds no {self.tokenizer.mask_token} token (within the first "
                             f"{self.max_length} tokens): {item[:80]!r}.")
        return [feature]

    def outputs(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        at_mask = batch["input_ids"] == self.tokenizer.mask_token_id
        scores = self.model(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"],
                            pred_positions=at_mask)  # [masks in the batch, V], row-major
        probabilities = scores.float().softmax(-1)
        counts = at_mask.sum(1)
        per_row = probabilities.new_zeros(len(counts), int(counts.max()), probabilities.shape[-1])
        slots = torch.arange(per_row.shape[1], device=counts.device)[None] < counts[:, None]
        per_row[slots] = probabilities
        return per_row  # [B, most masks in a row, V]: each row's masks in text order

    def postprocess(self, item: str, features: list[dict], outputs: list[np.ndarray], params: dict) -> Any:
        ids = np.asarray(features[0]["input_ids"])
        positions = np.flatnonzero(ids == self.tokenizer.mask_token_id)
        targets = self._target_ids(params["targets"])
        single = len(positions) == 1
        answers = []
        for slot, position in enumerate(positions):
            probabilities = outputs[0][slot]
            candidates = np.arange(len(probabilities)) if targets is None else targets
            top = min(params["top_k"], len(candidates))
            order = np.argsort(-probabilities[candidates], kind="stable")[:top]
            row = []
            for token in candidates[order].tolist():
                filled = ids.copy()
                filled[position] = token
                # HF's sequence leaves out the padding id: the end-of-text too where it pads (EuroBERT)
                filled = filled[filled != self.tokenizer.pad_token_id] if self.tokenizer.pad_token_id is not None \
                    else filled
                row.append({"score": float(probabilities[token]), "token": int(token),
                            "token_str": self.tokenizer.decode([token]),
                            "sequence": self.tokenizer.decode(filled.tolist(), skip_special_tokens=single)})
            answers.append(row)
        return answers[0] if single else answers

    def _target_ids(self, targets: str | list[str] | None) -> np.ndarray | None:
        if targets is None:
            return None
        vocab = self.tokenizer.get_vocab()
        ids = []
        for target in [targets] if isinstance(targets, str) else targets:
            pieces = [vocab[target]] if target in vocab else \
                self.tokenizer(target, add_special_tokens=False)["input_ids"]
            if pieces:
                ids.append(pieces[0])
        if not ids:
            raise ValueError(f"targets {targets!r} hold no token of this model's vocabulary.")
        return np.array(sorted(set(ids)))
