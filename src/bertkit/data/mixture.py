"""Pretraining on several data directories at once, mixed with weights: ``--data wiki:0.7 books:0.3``.

:func:`parse_data_specs` reads what ``--data`` (or ``pretrain(data_dir=...)``) was given: ``PATH``
or ``PATH:WEIGHT`` entries, all weighted or none. :func:`open_pretraining_data` opens them: one
directory is a :class:`~bertkit.data.shards.PretrainingDataset` as always (a weight alone means
nothing), several are a :class:`MixedPretrainingDataset`, their concatenation in the order given,
which refuses directories that cannot share one model and one collator. The weights are data here;
drawing by them is the training engine's :class:`~bertkit.training.sampler.MixtureSampler`. Without
weights, several directories are plainly concatenated (each instance once per epoch).
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from bertkit.data.shards import PretrainingCollator, PretrainingDataset
from bertkit.tokenization import BERTTokenizerFast
from bertkit.tokenization.files import tokenizer_differences, tokenizer_fingerprint

#: what --data / ``data_dir`` accept: a path, ``"PATH:WEIGHT"``, ``(path, weight)``, or a list of those
DataEntry = str | os.PathLike | tuple[str | os.PathLike, float | None]

FLAG = "--data"


@dataclass(frozen=True)
class DataSpec:
    """One parsed entry: the directory, its weight (None: unweighted) and the entry as given (for messages)."""

    path: Path
    weight: float | None
    entry: str


def parse_data_specs(data: DataEntry | Sequence[DataEntry]) -> list[DataSpec]:
    """The entries of ``--data`` / ``data_dir``, checked; ``ValueError`` naming ``--data`` and the entry otherwise.

    A string is ``PATH`` or ``PATH:WEIGHT``: it is split at its last colon when what follows is a number,
    unless a directory with the whole name exists (so paths with colons work); a ``Path`` is never split;
    a pair is ``(path, weight)``, ``(path, None)`` being unweighted. Each path must be an existing
    directory, named once; weights must be positive and finite, and given for every entry or for none.
    """
    entries = [data] if isinstance(data, (str, os.PathLike)) else list(data)
    if not entries:
        raise ValueError(f"{FLAG} got no directory; give one or more, e.g. {FLAG} wiki:0.7 books:0.3.")
    specs = [_parse_entry(entry) for entry in entries]
    seen: dict[Path, DataSpec] = {}
    for spec in specs:
        first = seen.setdefault(spec.path.resolve(), spec)
        if first is not spec:
            raise ValueError(f"{FLAG} names one directory twice ({first.entry} and {spec.entry}); give it once "
                             "(with the sum of the weights).")
    weighted = [s.entry for s in specs if s.weight is not None]
    if weighted and len(weighted) < len(specs):
        unweighted = [s.entry for s in specs if s.weight is None]
        raise ValueError(f"{FLAG} mixes weighted entries ({', '.join(weighted)}) with unweighted ones "
                         f"({', '.join(unweighted)}); give every entry a weight (PATH:WEIGHT) or none (then each "
                         "directory counts by its size).")
    if weighted:
        _check_shares(specs)
    return specs


def _check_shares(specs: list[DataSpec]) -> None:
    """Refuse weights whose ratio a float cannot hold: an entry whose share of the mix rounds to 0 (never
    drawn), named as given. The shares are taken relative to the largest weight, so no sum overflows."""
    largest = max(specs, key=lambda s: s.weight)
    relative = [s.weight / largest.weight for s in specs]
    total = math.fsum(relative)
    for spec, share in zip(specs, relative):
        if not share / total > 0:
            raise ValueError(f"{FLAG} entry {spec.entry}: its weight is too small next to {largest.entry} (its share "
                             "of the mix rounds to 0, so it would never be drawn); give weights of comparable "
                             "size, e.g. 1 and 0.001.")


def _parse_entry(entry: DataEntry) -> DataSpec:
    if isinstance(entry, (tuple, list)) and len(entry) == 2:
        path, weight = entry
        name = f"{os.fspath(path)}:{weight}" if weight is not None else os.fspath(path)
        if weight is not None and (isinstance(weight, bool) or not isinstance(weight, (int, float))):
            raise ValueError(f"{FLAG} entry {name}: the weight {weight!r} is not a number; give a positive number.")
    elif isinstance(entry, str):
        path, weight, name = entry, None, entry
        head, colon, tail = entry.rpartition(":")
        if colon and not Path(entry).is_dir() and _is_number(tail):
            path, weight = head, float(tail)
    elif isinstance(entry, os.PathLike):
        path, weight, name = entry, None, os.fspath(entry)
    else:
        raise ValueError(f"{FLAG} entry {entry!r} is neither a path, PATH:WEIGHT nor a (path, weight) pair.")
    if weight is not None and not (math.isfinite(weight) and weight > 0):
        raise ValueError(f"{FLAG} entry {name}: its weight must be a positive, finite number (e.g. "
                         f"{os.fspath(path)}:0.5).")
    if not os.fspath(path):
        raise ValueError(f"{FLAG} entry {name!r} names no directory; give PATH or PATH:WEIGHT.")
    path = Path(path)
    if not path.is_dir():
        hint = (" (a weight after the last colon must be a number, e.g. wiki:0.7)"
                if ":" in name and weight is None else "")
        what = f"{os.fspath(path)!r} is not a directory" if path.exists() else f"no such directory {os.fspath(path)!r}"
        raise ValueError(f"{FLAG} entry {name}: {what}{hint}; give a directory written by bertkit data create.")
    return DataSpec(path, None if weight is None else float(weight), name)


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def open_pretraining_data(data: DataEntry | Sequence[DataEntry]) -> PretrainingData:
    """:func:`parse_data_specs`, then one directory's :class:`PretrainingDataset` (a lone weight changes
    nothing) or several directories' :class:`MixedPretrainingDataset` with their weights."""
    specs = parse_data_specs(data)
    if len(specs) == 1:
        return PretrainingDataset(specs[0].path)
    weights = [s.weight for s in specs] if specs[0].weight is not None else None
    if weights is not None and not math.isfinite(sum(weights)):  # huge weights (1e308): relative to the largest
        weights = [w / max(weights) for w in weights]
    return MixedPretrainingDataset([s.path for s in specs], weights)


_SAME_TOKENIZER = "build them with the same tokenizer (bertkit data create --tokenizer)"
#: index settings every mixed directory must share, with how to make them agree ("tokenizer" covers its settings)
_SHARED = {
    "max_seq_length": "build them with the same bertkit data create --max-seq-length",
    "static_masking": "build them all with bertkit data create --static-masking, or all without",
    "vocab_size": _SAME_TOKENIZER,
    "tokenizer": _SAME_TOKENIZER,
}
#: with dynamic masking one collator masks every batch as these say
_SHARED_DYNAMIC = {
    "masked_lm_prob": "build them with the same bertkit data create --masked-lm-prob (one collator masks every "
                      "batch)",
    "whole_word_masking": "build them all with bertkit data create --whole-word-masking, or all without (one "
                          "collator masks every batch)",
}


class MixedPretrainingDataset(torch.utils.data.ConcatDataset):
    """Several data directories as one dataset: their :class:`PretrainingDataset` s concatenated in order.

    Index ``i`` of the mix is instance ``i - offset`` of the directory holding it (``cumulative_sizes``
    as :class:`torch.utils.data.ConcatDataset`). ``weights`` (normalised to sum 1, or None for plain
    concatenation) is for the sampler. Offers what training and evaluation use of one directory:
    ``index`` (summed counts and the shared settings), ``max_seq_length``, ``static_masking``,
    ``load_tokenizer``, ``collator``, ``token_arrays``. Directories built with another tokenizer, another
    ``max_seq_length``, static vs dynamic masking, or (dynamic) another masking rate or whole-word setting
    are refused: ``ValueError`` naming both directories and the setting.
    """

    def __init__(self, data_dirs: Sequence[str | os.PathLike | PretrainingDataset],
                 weights: Sequence[float] | None = None):
        parts = [d if isinstance(d, PretrainingDataset) else PretrainingDataset(d) for d in data_dirs]
        if weights is not None:
            if len(weights) != len(parts) or not all(math.isfinite(w) and w > 0 for w in weights):
                raise ValueError(f"MixedPretrainingDataset needs one positive, finite weight per directory, got "
                                 f"{list(weights)} for {len(parts)} directories.")
            weights = [w / math.fsum(weights) for w in weights]
        _check_compatible(parts)
        super().__init__(parts)
        self.weights: list[float] | None = weights

    @property
    def data_dirs(self) -> list[Path]:
        return [part.data_dir for part in self.datasets]

    @property
    def sizes(self) -> list[int]:
        return [len(part) for part in self.datasets]

    @property
    def index(self) -> dict[str, Any]:
        first = self.datasets[0].index
        counts = {key: sum(int(part.index.get(key, 0)) for part in self.datasets)
                  for key in ("num_instances", "num_documents", "num_tokens")}
        return {**{key: first[key] for key in (*_SHARED, *_SHARED_DYNAMIC) if key in first}, **counts}

    @property
    def max_seq_length(self) -> int:
        return self.datasets[0].max_seq_length

    @property
    def static_masking(self) -> bool:
        return self.datasets[0].static_masking

    def load_tokenizer(self) -> BERTTokenizerFast:
        """The tokenizer the directories share."""
        return self.datasets[0].load_tokenizer()

    def collator(self, **kwargs: Any) -> PretrainingCollator:
        """As :meth:`PretrainingDataset.collator` (the directories share what it reads)."""
        return self.datasets[0].collator(**kwargs)

    def token_arrays(self) -> Iterator[np.ndarray]:
        """Every directory's shards' token ids, in order."""
        for part in self.datasets:
            yield from part.token_arrays()


#: what training reads: one directory's dataset, or several directories' mix
PretrainingData = PretrainingDataset | MixedPretrainingDataset


def data_parts(dataset: PretrainingData) -> list[PretrainingDataset]:
    """The directories' datasets: ``dataset`` itself for one directory."""
    return list(dataset.datasets) if isinstance(dataset, MixedPretrainingDataset) else [dataset]


def _check_compatible(parts: list[PretrainingDataset]) -> None:
    """``ValueError`` naming both directories and the setting when one differs from the first directory's."""
    first, *others = parts
    for part in others:
        ours, theirs = _settings(first), _settings(part)
        for key in [*ours, *(key for key in theirs if key not in ours)]:
            if ours.get(key) != theirs.get(key):
                _refuse(first, part, f"{key} is {ours.get(key)!r} in {first.data_dir} but {theirs.get(key)!r} in "
                                     f"{part.data_dir}", {**_SHARED, **_SHARED_DYNAMIC}[key.split(".")[0]])
        differ = tokenizer_differences(tokenizer_fingerprint(first.load_tokenizer()),
                                       tokenizer_fingerprint(part.load_tokenizer()), str(first.data_dir),
                                       str(part.data_dir))
        if differ:
            _refuse(first, part, f"they were built with different tokenizers: {'; '.join(differ)}", _SAME_TOKENIZER)


def _settings(part: PretrainingDataset) -> dict[str, Any]:
    """The index settings :data:`_SHARED` (and with dynamic masking :data:`_SHARED_DYNAMIC`) name, flat:
    ``tokenizer.do_lower_case`` and so on (where the tokenizer's copy lies is no setting)."""
    keys = [*_SHARED, *(_SHARED_DYNAMIC if not part.static_masking else ())]
    settings = {key: part.index.get(key) for key in keys if key != "tokenizer"}
    tokenizer = part.index.get("tokenizer") or {}
    return settings | {f"tokenizer.{key}": value for key, value in tokenizer.items() if key != "dir"}


def _refuse(first: PretrainingDataset, part: PretrainingDataset, what: str, fix: str) -> None:
    raise ValueError(f"{FLAG} cannot mix {first.data_dir} and {part.data_dir}: {what}; {fix}.")
