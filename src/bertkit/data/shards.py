"""Pretraining data on disk: the dataset that reads a data directory, and its collator.

A data directory written by :func:`bertkit.data.create.create_pretraining_data` holds:

- ``index.json``: counts, ``max_seq_length``, vocabulary size, dtypes, the creation
  settings, the tokenizer settings, the inputs and partitions, and the list of shards
  (written last: its presence means the directory is complete);
- ``creation.json`` (the settings a creation run claimed the directory with), one
  ``part-NNNNN.json`` marker per tokenized partition and one ``block-NNNNN.json`` per paired
  block (:mod:`bertkit.data.blocks`);
- ``tokenizer/``: a copy of the tokenizer (``save_pretrained``);
- per shard ``shard-BBBBB-KKK.<field>.npy`` (pairing block ``B``, its shard ``K``), in the layout
  :mod:`bertkit.data.writing` describes.

:class:`PretrainingDataset` maps shards with ``np.load(mmap_mode="r")`` on first use, so a
corpus larger than memory streams.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from bertkit.data.create import create_pretraining_data
from bertkit.data.writing import FIELDS, FORMAT, INDEX_NAME, MASK_FIELDS, TOKENIZER_DIR, write_shard
from bertkit.io import read_json_object
from bertkit.masking import continuation_table, mask_tokens, whole_word_ids
from bertkit.tokenization import BERTTokenizerFast

__all__ = ["INDEX_NAME", "TOKENIZER_DIR", "PretrainingCollator", "PretrainingDataset", "create_pretraining_data",
           "write_shard"]


class PretrainingDataset(torch.utils.data.Dataset):
    """The instances of a data directory; shards are memory-mapped on first access.

    ``dataset[i]`` is a dict of long tensors: ``input_ids`` ``[L]``, ``token_type_ids``
    ``[L]`` (0 for [CLS] A [SEP], 1 for B [SEP]) and ``nsp_labels`` (scalar), plus with static
    masking ``masked_positions`` and ``masked_labels`` ``[P]``. Pickles without its maps
    (DataLoader workers re-open them).
    """

    def __init__(self, data_dir: str | os.PathLike):
        self.data_dir = Path(data_dir)
        index_path = self.data_dir / INDEX_NAME
        if not index_path.is_file():
            raise ValueError(f"{self.data_dir} holds no {INDEX_NAME}: not a (complete) pretraining data directory.")
        self.index = read_json_object(index_path, f"a {FORMAT} index (create the data again)")
        if self.index.get("format") != FORMAT:
            raise ValueError(f"{index_path} is not a {FORMAT} index (format {self.index.get('format')!r}).")
        counts = [s["num_instances"] for s in self.index["shards"]]
        self._ends = np.cumsum(counts)
        self._maps: dict[int, dict[str, np.ndarray]] = {}

    def __len__(self) -> int:
        return int(self.index["num_instances"])

    @property
    def static_masking(self) -> bool:
        return bool(self.index["static_masking"])

    @property
    def max_seq_length(self) -> int:
        return int(self.index["max_seq_length"])

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        n = len(self)
        if not -n <= i < n:
            raise IndexError(f"index {i} is out of range for {n} instances.")
        i %= n
        shard = int(np.searchsorted(self._ends, i, side="right"))
        j = i - (int(self._ends[shard - 1]) if shard else 0)
        arrays = self._shard(shard)
        lo, hi = arrays["offsets"][j], arrays["offsets"][j + 1]
        input_ids = torch.from_numpy(arrays["tokens"][lo:hi].astype(np.int64))
        token_type_ids = torch.zeros_like(input_ids)
        token_type_ids[int(arrays["segment_starts"][j]):] = 1
        item = {"input_ids": input_ids, "token_type_ids": token_type_ids,
                "nsp_labels": torch.tensor(int(arrays["nsp_labels"][j]))}
        if self.static_masking:
            m0, m1 = arrays["masked_offsets"][j], arrays["masked_offsets"][j + 1]
            item["masked_positions"] = torch.from_numpy(arrays["masked_positions"][m0:m1].astype(np.int64))
            item["masked_labels"] = torch.from_numpy(arrays["masked_labels"][m0:m1].astype(np.int64))
        return item

    def _shard(self, k: int) -> dict[str, np.ndarray]:
        if k not in self._maps:
            name = self.index["shards"][k]["name"]
            fields = FIELDS + (MASK_FIELDS if self.static_masking else ())
            self._maps[k] = {f: np.load(self.data_dir / f"{name}.{f}.npy", mmap_mode="r", allow_pickle=False)
                             for f in fields}
        return self._maps[k]

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_maps": {}}

    def token_arrays(self) -> Iterator[np.ndarray]:
        """Each shard's token ids (memory-mapped, instances concatenated), e.g. for frequency counts."""
        for k in range(len(self.index["shards"])):
            yield self._shard(k)["tokens"]

    def load_tokenizer(self) -> BERTTokenizerFast:
        """The tokenizer copy saved with the data."""
        return BERTTokenizerFast.from_pretrained(self.data_dir / self.index["tokenizer"]["dir"])

    def collator(self, **kwargs: Any) -> PretrainingCollator:
        """A :class:`PretrainingCollator` matching this data (its tokenizer, static or dynamic masking,
        and the recorded ``masked_lm_prob`` / whole-word setting); ``kwargs`` override."""
        defaults = dict(dynamic=not self.static_masking, mlm_probability=self.index["masked_lm_prob"],
                        whole_word=self.index["whole_word_masking"])
        return PretrainingCollator.from_tokenizer(self.load_tokenizer(), **{**defaults, **kwargs})


class PretrainingCollator:
    """Pads instances into a batch and masks them: the batch dict ``training_step`` consumes.

    Returns long tensors ``input_ids``, ``attention_mask``, ``token_type_ids`` ``[B, L]``
    (``L`` the longest instance rounded up to ``pad_to_multiple_of``), ``mlm_labels``
    ``[B, L]`` (-100 where nothing is predicted) and ``nsp_labels`` ``[B]`` (left out with
    ``nsp=False``: the model then trains on MLM alone). With ``token_types=False`` ``token_type_ids`` are
    all 0, for a model with one token type (RoBERTa's ``type_vocab_size`` 1: the instance's B segment would
    index past its table).
    With ``dynamic=True`` every batch is masked afresh by
    :func:`bertkit.masking.mask_tokens` (``mlm_probability``, 80/10/10, at most
    ``max_predictions`` per row, whole words with ``whole_word`` and the ``continuation``
    table of ``##`` ids) using the collator's own ``generator``; :meth:`state_dict` /
    :meth:`load_state_dict` save and restore it for an exact resume. With
    ``dynamic=False`` the instances carry static masks and their stored labels are used.
    In DataLoader workers each worker reseeds its copy once from the worker's seed (which
    follows ``torch.manual_seed`` or the DataLoader's ``generator``), so workers never repeat
    each other's masks; an exact mid-epoch resume of the masks needs ``num_workers=0``.
    """

    def __init__(self, vocab_size: int, mask_token_id: int, special_token_ids: Sequence[int],
                 mlm_probability: float = 0.15, pad_to_multiple_of: int | None = 8, dynamic: bool = True,
                 whole_word: bool = False, generator: torch.Generator | None = None, *, pad_token_id: int = 0,
                 continuation: torch.Tensor | None = None, max_predictions: int | None = None,
                 mask_replace_prob: float = 0.8, random_replace_prob: float = 0.1, nsp: bool = True,
                 token_types: bool = True):
        if whole_word and dynamic and continuation is None:
            raise ValueError("whole_word masking needs continuation= (which ids are ## pieces); "
                             "PretrainingCollator.from_tokenizer builds it.")
        if continuation is not None and len(continuation) != vocab_size:
            raise ValueError(f"continuation has {len(continuation)} entries for a vocabulary of {vocab_size}.")
        self.vocab_size, self.mask_token_id = vocab_size, mask_token_id
        self.special_token_ids = list(special_token_ids)
        self.mlm_probability, self.pad_to_multiple_of = mlm_probability, pad_to_multiple_of
        self.dynamic, self.whole_word = dynamic, whole_word
        self.pad_token_id, self.continuation, self.max_predictions = pad_token_id, continuation, max_predictions
        self.mask_replace_prob, self.random_replace_prob = mask_replace_prob, random_replace_prob
        self.nsp, self.token_types = nsp, token_types
        self.generator = generator if generator is not None else torch.Generator().manual_seed(torch.initial_seed())
        self._worker: tuple[int, int] | None = None

    @classmethod
    def from_tokenizer(cls, tokenizer: BERTTokenizerFast, **kwargs: Any) -> PretrainingCollator:
        """Vocabulary size, [MASK], [PAD], the special ids and the ``##`` table from ``tokenizer``."""
        kwargs.setdefault("pad_token_id", tokenizer.pad_token_id)
        if kwargs.get("whole_word"):
            kwargs.setdefault("continuation", continuation_table(tokenizer.vocab))
        return cls(tokenizer.vocab_size, tokenizer.mask_token_id, tokenizer.all_special_ids, **kwargs)

    def __call__(self, items: Sequence[Mapping[str, Any]]) -> dict[str, torch.Tensor]:
        if not items:
            raise ValueError("cannot collate an empty list of instances.")
        static = "masked_positions" in items[0]
        if static == self.dynamic:
            raise ValueError("these instances carry static masks: use dynamic=False" if static else
                             "these instances carry no static masks: use dynamic=True")
        lengths = [len(item["input_ids"]) for item in items]
        width = max(lengths)
        if self.pad_to_multiple_of:
            width = -(-width // self.pad_to_multiple_of) * self.pad_to_multiple_of
        input_ids = torch.full((len(items), width), self.pad_token_id, dtype=torch.long)
        token_type_ids = torch.zeros_like(input_ids)
        attention_mask = torch.zeros_like(input_ids)
        for r, (item, n) in enumerate(zip(items, lengths)):
            input_ids[r, :n] = torch.as_tensor(item["input_ids"])
            if self.token_types and "token_type_ids" in item:
                token_type_ids[r, :n] = torch.as_tensor(item["token_type_ids"])
            attention_mask[r, :n] = 1
        if static:
            mlm_labels = torch.full_like(input_ids, -100)
            for r, item in enumerate(items):
                mlm_labels[r, torch.as_tensor(item["masked_positions"], dtype=torch.long)] = \
                    torch.as_tensor(item["masked_labels"], dtype=torch.long)
        else:
            input_ids, mlm_labels = self._mask(input_ids, attention_mask)
        batch = {"input_ids": input_ids, "attention_mask": attention_mask, "token_type_ids": token_type_ids,
                 "mlm_labels": mlm_labels}
        if self.nsp and "nsp_labels" in items[0]:
            batch["nsp_labels"] = torch.tensor([int(item["nsp_labels"]) for item in items], dtype=torch.long)
        return batch

    def _mask(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        worker = torch.utils.data.get_worker_info()
        if worker is not None and self._worker != (worker.id, worker.seed):
            self.generator.manual_seed((self.generator.initial_seed() * 1_000_003 + worker.seed) % 2**63)
            self._worker = (worker.id, worker.seed)
        word_ids = whole_word_ids(input_ids, self.continuation) if self.whole_word else None
        return mask_tokens(input_ids, vocab_size=self.vocab_size, mask_token_id=self.mask_token_id,
                           attention_mask=attention_mask, special_token_ids=self.special_token_ids,
                           mlm_probability=self.mlm_probability, mask_replace_prob=self.mask_replace_prob,
                           random_replace_prob=self.random_replace_prob, generator=self.generator,
                           max_predictions=self.max_predictions, whole_word=self.whole_word, word_ids=word_ids)

    def state_dict(self) -> dict[str, torch.Tensor]:
        return {"generator": self.generator.get_state()}

    def __getstate__(self) -> dict[str, Any]:
        # a torch.Generator does not survive pickling into spawned DataLoader workers (torch 2.x); its state does
        state = {**self.__dict__, "generator": bytes(self.generator.get_state().numpy())}
        state["_seed"] = self.generator.initial_seed()
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        generator = torch.Generator().manual_seed(state.pop("_seed"))
        generator.set_state(torch.frombuffer(bytearray(state["generator"]), dtype=torch.uint8))
        self.__dict__.update(state, generator=generator)

    def load_state_dict(self, state: Mapping[str, torch.Tensor]) -> None:
        self.generator.set_state(state["generator"])
