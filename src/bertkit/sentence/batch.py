"""The batch every embedding and reranking loss reads: rows tokenized by column, texts identified, labels."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import torch

#: ``embed(inputs) -> [n, d]``: one column's tokenized inputs (``input_ids``, ``attention_mask``, maybe
#: ``token_type_ids``, each ``[n, L]``) to its embeddings, with gradients when training
Embed = Callable[[Mapping[str, torch.Tensor]], torch.Tensor]


@dataclass
class PairBatch:
    """``n`` rows of a training file, tokenized column by column.

    ``columns``: the role of each column, in order: ``"anchor"`` first, then ``"positive"``, then
    ``"negative_1"``, ``"negative_2"``, ... (a pair file has two columns, a triplet file three).
    ``inputs[c]``: column ``c``'s tokenized texts, a mapping of ``[n, L_c]`` tensors (``input_ids``,
    ``attention_mask``, and ``token_type_ids`` where the model has them).
    ``text_ids[c]``: int64 ``[n]``: equal ids, in any column of the batch, if and only if the texts are
    identical (the loss masks such a duplicate out of a row's negatives).
    ``labels``: float32 ``[n]`` (a pair's score or 0/1 label) or ``[n, k]`` (teacher scores: MarginMSE's
    margins, KL distillation's scores over the row's candidates), or None.
    """

    columns: list[str]
    inputs: list[Mapping[str, torch.Tensor]]
    text_ids: list[torch.Tensor]
    labels: torch.Tensor | None = None
    extra: dict[str, torch.Tensor] = field(default_factory=dict)

    def __post_init__(self):
        if not self.columns or len(self.inputs) != len(self.columns) or len(self.text_ids) != len(self.columns):
            raise ValueError(f"a PairBatch needs one inputs mapping and one text_ids tensor per column: "
                             f"{len(self.columns)} columns, {len(self.inputs)} inputs, {len(self.text_ids)} text_ids")
        rows = {int(ids.shape[0]) for ids in self.text_ids}
        rows |= {int(next(iter(inputs.values())).shape[0]) for inputs in self.inputs}
        if self.labels is not None:
            rows.add(int(self.labels.shape[0]))
        if len(rows) != 1:
            raise ValueError(f"every column of a PairBatch needs the same number of rows, got {sorted(rows)}")

    @property
    def rows(self) -> int:
        return int(self.text_ids[0].shape[0])

    @property
    def num_tokens(self) -> torch.Tensor:
        """The real (unpadded) tokens of every column: what the model reads (the Trainer's tokens per second); a
        static model's column (flat ``input_ids`` with ``offsets``) has no padding."""
        return sum(inputs["attention_mask"].sum() if "attention_mask" in inputs else inputs["input_ids"].numel()
                   for inputs in self.inputs if "attention_mask" in inputs or "offsets" in inputs)

    def column(self, name: str) -> int:
        """The index of the column named ``name`` (``ValueError`` naming the columns there are)."""
        try:
            return self.columns.index(name)
        except ValueError:
            raise ValueError(f"this loss needs a {name!r} column; the batch has {self.columns}") from None


def same_text(own: Sequence[torch.Tensor], candidates: torch.Tensor) -> torch.Tensor:
    """``[n, m]`` bool: True where candidate j's text id (``candidates [m]``) equals one of row i's text ids in
    ``own`` (e.g. its anchor's and its positive's, each ``[n]``). How every loss keeps a duplicate text out of a
    row's negatives: by identity (:attr:`PairBatch.text_ids`), whatever the encoder makes of it (dropout
    included); a caller that scores row i's own positive among the candidates unmasks that entry itself."""
    mask = torch.zeros(own[0].shape[0], candidates.shape[0], dtype=torch.bool, device=candidates.device)
    for text in own:
        mask |= candidates[None, :] == text.to(candidates.device)[:, None]
    return mask
