"""Training files for embedding models and rerankers, read as a stream of batches of one file's rows.

A training file is JSON lines (or one JSON list), CSV, TSV (read by :mod:`bertkit.tasks.readers`, possibly
compressed), Parquet, an Arrow stream (each told by its content whatever its name: :mod:`bertkit.data.sniff`),
or a ``datasets.save_to_disk`` directory (its Arrow files, found by
:func:`bertkit.data.partitions.expand_inputs`). Its columns take roles (anchor, positive, negatives, label)
as :mod:`bertkit.sentence.data_layout` decides from the names or positions. :func:`training_rows` reads
one file row by row; nothing holds a whole file.

:class:`EmbeddingDataset` yields :class:`RowBatch` es, each from one file (the rows of a batch share their
columns). Within a file, rows pass through a seeded shuffle buffer. Several files are mixed per batch:
``"proportional"`` draws each batch's file with probability proportional to its number of batches (every
batch of every file once per epoch, in a seeded order, as sentence-transformers' proportional sampler);
``"round_robin"`` takes the files in turn and ends the epoch when one runs out (as its round-robin sampler).
The order is a function of the seed, the epoch and the files only; :meth:`EmbeddingDataset.state_dict` is
the position (epoch, batches taken), and a dataset given it back resumes at the next batch (by reading
past the batches already taken, without tokenizing them).

:class:`PairCollator` tokenizes a :class:`RowBatch` into a :class:`~bertkit.sentence.batch.PairBatch`.
"""

from __future__ import annotations

import itertools
import os
import random
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from bertkit.data.partitions import expand_inputs, pyarrow_module
from bertkit.data.sniff import sniff_format
from bertkit.sentence.batch import PairBatch
from bertkit.sentence.data_layout import ColumnLayout, check_row, resolve_columns
from bertkit.tasks.readers import iter_rows, where
from bertkit.tokenization.cut import cut_texts

#: rows read from a file's start to decide its layout (numbers or text, lists or texts)
SAMPLE_ROWS = 100
SAMPLINGS = ("proportional", "round_robin")


@dataclass
class RowBatch:
    """Rows of one training file: ``rows[i]`` maps a role to its value (text, list of texts, label);
    ``where[i]`` names the row (``"FILE, line 7"``, ``"FILE, row 7"``) for errors."""

    source: str
    rows: list[dict[str, Any]]
    where: list[str]

    def part(self, rank: int, world_size: int) -> RowBatch:
        """Rank ``rank`` 's contiguous share of this (global) batch under ``world_size`` data-parallel ranks:
        rows ``rank * k .. (rank + 1) * k`` with ``k = len(rows) / world_size`` (ValueError if it does not divide).
        Rank 0 holds the first rows, so the ranks' shares concatenated in rank order are the batch."""
        k, rest = divmod(len(self.rows), world_size)
        if rest:
            raise ValueError(f"{self.source}: a batch of {len(self.rows)} rows does not split into {world_size} "
                             "equal shares; train with drop_last so every batch is whole.")
        share = slice(rank * k, (rank + 1) * k)
        return RowBatch(self.source, self.rows[share], self.where[share])


# ---------------------------------------------------------------------------- one file

def table_records(path: str | os.PathLike, encoding: str = "utf-8") -> Iterator[tuple[str, dict[str, Any]]]:
    """``(where, values)`` per record of the file or ``save_to_disk`` directory ``path``, in file order."""
    path = os.fspath(path)
    if not os.path.exists(path):
        raise ValueError(f"no such training file or directory: {path}")
    if os.path.isdir(path):
        arrows = expand_inputs(path)  # a DatasetDict directory is refused there, naming its splits
        if not os.path.isfile(os.path.join(path, "state.json")):
            raise ValueError(f"{path} is a directory but not one datasets.save_to_disk wrote (no state.json); pass "
                             "its training files instead.")
        numbers = itertools.count(1)
        for arrow in arrows:
            yield from _arrow_records(arrow, path, numbers, "arrow")
        return
    kind = sniff_format(path, encoding)
    if kind in ("parquet", "arrow"):
        yield from _arrow_records(path, path, itertools.count(1), kind)
        return
    for row in iter_rows(path, encoding=encoding):
        yield where(path, row.line), row.values


def _arrow_records(path: str, name: str, numbers: Iterator[int], kind: str) -> Iterator[tuple[str, dict[str, Any]]]:
    """Records of a Parquet file (``kind`` "parquet", a batch of rows at a time) or an Arrow stream (``"arrow"``),
    named ``"{name}, row N"``."""
    if kind == "parquet":
        pq = pyarrow_module("parquet", path)
        try:
            batches = pq.ParquetFile(path).iter_batches(batch_size=1024)
        except Exception as error:  # pyarrow.ArrowInvalid: not Parquet, or cut short
            raise ValueError(f"{path} is not a readable Parquet file ({error}): truncated or damaged? Write "
                             "it again.") from None
        for batch in batches:
            yield from ((f"{name}, row {n}", record) for record, n in zip(batch.to_pylist(), numbers))
        return
    pa = pyarrow_module("ipc", path)
    with pa.memory_map(path) as source:
        try:
            reader = pa.ipc.open_stream(source)
        except Exception as error:  # pyarrow.ArrowInvalid
            raise ValueError(f"{path} is not a readable Arrow stream ({error}), as datasets.save_to_disk writes "
                             "them.") from None
        for batch in reader:
            yield from ((f"{name}, row {n}", record) for record, n in zip(batch.to_pylist(), numbers))


def file_layout(path: str | os.PathLike, columns: Mapping[str, Any] | None = None,
                encoding: str = "utf-8") -> ColumnLayout:
    """The roles of the columns of ``path``, from its first :data:`SAMPLE_ROWS` rows (see
    :func:`~bertkit.sentence.data_layout.resolve_columns`); a file without rows is refused."""
    sample = [values for _, values in itertools.islice(table_records(path, encoding), SAMPLE_ROWS)]
    if not sample:
        raise ValueError(f"{os.fspath(path)} holds no rows; remove it from the training files.")
    names = list(dict.fromkeys(name for values in sample for name in values))
    return resolve_columns(names, sample, columns, path=os.fspath(path))


def training_rows(path: str | os.PathLike, layout: ColumnLayout, encoding: str = "utf-8",
                  check: Callable[[dict[str, Any], str], None] | None = None) -> Iterator[tuple[str, dict[str, Any]]]:
    """``(where, row)`` per row of ``path``, each checked against ``layout``
    (:func:`~bertkit.sentence.data_layout.check_row`: the first bad row raises, naming the file and row) and by
    ``check(row, where)`` (what the loss needs of a row, e.g. a
    :class:`~bertkit.sentence.data_layout.LabelRule`)."""
    for place, values in table_records(path, encoding):
        row = check_row(values, layout, place)
        if check is not None:
            check(row, place)
        yield place, row


# ---------------------------------------------------------------------------- several files

class EmbeddingDataset:
    """Batches of ``batch_size`` rows from the training ``files`` (see the module docstring).

    ``columns``: role -> column for every file (default: each file's names or positions). ``sampling``:
    ``"proportional"`` or ``"round_robin"``. ``shuffle_buffer``: rows held to shuffle a file's rows (1:
    file order). ``drop_last``: leave out a file's last, short batch. Opening the dataset reads every file
    once, checking each row (against its layout, and by ``check(row, where)``: what the loss needs of a row, e.g. a
    :class:`~bertkit.sentence.data_layout.LabelRule`) and counting them, so bad data fails before training starts.

    Iterating yields the current epoch's batches from the current position; at its end the position moves
    to the next epoch's start. ``len()`` is the number of batches per epoch.
    """

    def __init__(self, files: str | os.PathLike | Sequence[str | os.PathLike], batch_size: int, *,
                 columns: Mapping[str, Any] | None = None, sampling: str = "proportional", seed: int = 0,
                 shuffle_buffer: int = 10_000, drop_last: bool = False, encoding: str = "utf-8",
                 check: Callable[[dict[str, Any], str], None] | None = None):
        if sampling not in SAMPLINGS:
            raise ValueError(f"sampling must be one of {SAMPLINGS}, got {sampling!r}.")
        for name, value in (("batch_size", batch_size), ("shuffle_buffer", shuffle_buffer)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {value!r}.")
        files = [files] if isinstance(files, (str, os.PathLike)) else list(files)
        if not files:
            raise ValueError("EmbeddingDataset needs at least one training file.")
        self.files = [os.fspath(f) for f in files]
        self.batch_size, self.sampling, self.seed = batch_size, sampling, seed
        self.shuffle_buffer, self.drop_last, self.encoding = shuffle_buffer, drop_last, encoding
        self.layouts = [file_layout(f, columns, encoding) for f in self.files]
        self.sizes = [sum(1 for _ in training_rows(f, layout, encoding, check))
                      for f, layout in zip(self.files, self.layouts)]
        whole = [n // batch_size if drop_last else -(-n // batch_size) for n in self.sizes]
        if min(whole) == 0:
            short = whole.index(0)
            raise ValueError(f"{self.files[short]} has {self.sizes[short]} rows, fewer than one whole "
                             f"batch of {batch_size} (drop_last; a batch is --batch-size rows over all processes, "
                             "divided by --gradient-accumulation-steps); lower --batch-size or add rows.")
        self.batches_per_file = whole
        self.epoch, self.taken = 0, 0

    def __len__(self) -> int:
        return len(self.schedule(0))

    def set_epoch(self, epoch: int) -> None:
        """Start epoch ``epoch`` from its first batch (with :meth:`state_dict` / :meth:`load_state_dict`, this makes
        the dataset a batch source of the Trainer: :mod:`bertkit.training.batch_source`)."""
        self.epoch, self.taken = epoch, 0

    def schedule(self, epoch: int) -> list[int]:
        """The file index of each batch of ``epoch``, in order."""
        if self.sampling == "round_robin":
            return list(range(len(self.files))) * min(self.batches_per_file)
        order = [i for i, n in enumerate(self.batches_per_file) for _ in range(n)]
        random.Random(f"{self.seed}/{epoch}/files").shuffle(order)
        return order

    def __iter__(self) -> Iterator[RowBatch]:
        epoch, skip = self.epoch, self.taken
        streams = [self._batches(i, epoch) for i in range(len(self.files))]
        for position, index in enumerate(self.schedule(epoch)):
            batch = next(streams[index])
            if position < skip:
                continue
            self.taken = position + 1
            yield batch
        self.epoch, self.taken = epoch + 1, 0

    def _batches(self, index: int, epoch: int) -> Iterator[RowBatch]:
        """File ``index``'s batches in ``epoch``: its rows through a seeded shuffle buffer, cut in batches."""
        path = self.files[index]
        rows = _shuffled(training_rows(path, self.layouts[index], self.encoding), self.shuffle_buffer,
                         random.Random(f"{self.seed}/{epoch}/{index}"))
        while True:
            chunk = list(itertools.islice(rows, self.batch_size))
            if not chunk or (self.drop_last and len(chunk) < self.batch_size):
                return
            yield RowBatch(path, [row for _, row in chunk], [place for place, _ in chunk])

    def state_dict(self) -> dict[str, Any]:
        """The position (``epoch``, batches ``taken`` in it) and what fixes the order, for resuming."""
        return {"epoch": self.epoch, "taken": self.taken, "seed": self.seed, "sampling": self.sampling,
                "batch_size": self.batch_size, "shuffle_buffer": self.shuffle_buffer, "drop_last": self.drop_last,
                "files": [[os.path.abspath(f), n] for f, n in zip(self.files, self.sizes)]}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Resume at ``state`` 's position; ``ValueError`` naming each setting (then -> now) that would change
        the order of the batches (the files and their row counts, seed, sampling, batch size, buffer)."""
        now = self.state_dict()
        changed = [f"{key} {state.get(key)!r} -> {now[key]!r}" for key in now if key not in ("epoch", "taken")
                   and _plain(state.get(key)) != _plain(now[key])]
        if changed:
            raise ValueError(f"cannot resume the training data: {'; '.join(changed)}; resume with the files and "
                             "settings of the interrupted run, or start afresh.")
        self.epoch, self.taken = int(state["epoch"]), int(state["taken"])


def _plain(value: Any) -> Any:
    """Lists for tuples, so a state read back from JSON compares equal."""
    return [_plain(v) for v in value] if isinstance(value, (list, tuple)) else value


def _shuffled(items: Iterator, size: int, rng: random.Random) -> Iterator:
    """``items`` through a buffer of ``size``: each item out is drawn from the buffer by ``rng`` and replaced
    by the next item in (``size`` 1: the input order)."""
    buffer = list(itertools.islice(items, size))
    for item in items:
        slot = rng.randrange(len(buffer))
        yield buffer[slot]
        buffer[slot] = item
    rng.shuffle(buffer)
    yield from buffer


# ---------------------------------------------------------------------------- collation

class PairCollator:
    """A :class:`RowBatch` -> :class:`~bertkit.sentence.batch.PairBatch`: each column tokenized by
    ``tokenizer`` (a bertkit tokenizer) to ``max_length`` tokens (default: the tokenizer's limit), padded to
    the column's longest; ``prompts`` (role -> text, ``"negative"`` for every negative) prefixed to the
    column's texts (a prompted column's inputs also hold ``prompt_length [n]``: its tokens, as
    :func:`~bertkit.sentence.model.prompt_tokens` counts them). ``text_ids`` number the texts as in the file
    (before prompts): identical texts have one id in every column. Labels become float32 ``[n]`` (or ``[n, k]``).

    Data parallel (``world_size`` ranks): the collator is given the *global* batch (every rank's rows, every
    rank reading the same stream) and returns rank ``rank`` 's share (:meth:`RowBatch.part`), tokenizing only
    that share. ``text_ids`` number the texts of the whole global batch, so ids are comparable across ranks: a
    text on one rank and its duplicate on another have the same id, and the losses, which gather the ids with
    the embeddings, mask it (exact, no hashing, and cheap: numbering is a dictionary over the batch's texts).

    A batch without labels (in-batch negatives) in which one query comes with two different positives is
    refused (one of them would be the other's negative) unless ``allow_repeated_queries``; under DDP the
    check covers the global batch, whose rows are all in-batch negatives of each other.
    """

    def __init__(self, tokenizer, *, max_length: int | None = None, prompts: Mapping[str, str] | None = None,
                 allow_repeated_queries: bool = False, rank: int = 0, world_size: int = 1):
        prompts = dict(prompts or {})
        for role, prompt in prompts.items():
            if not (role in ("anchor", "positive", "negative") or role.startswith("negative_")) \
                    or not isinstance(prompt, str):
                raise ValueError(f"prompts: {role!r} -> {prompt!r}; prompts map a role (anchor, positive, negative, "
                                 "negative_i) to a text, e.g. prompts={'anchor': 'query: '}.")
        self.tokenizer, self.max_length, self.prompts = tokenizer, max_length, prompts
        self.allow_repeated_queries = allow_repeated_queries
        self.rank, self.world_size = rank, world_size

    def __call__(self, batch: RowBatch) -> PairBatch:
        columns = _columns(batch)
        labels = _labels(batch)
        if labels is None and not self.allow_repeated_queries:
            _refuse_repeated_queries(batch)
        ids: dict[str, int] = {}
        text_ids = [torch.tensor([ids.setdefault(t, len(ids)) for t in texts], dtype=torch.int64)
                    for texts in columns.values()]  # numbered over the global batch
        if self.world_size > 1:
            share = batch.part(self.rank, self.world_size)
            columns, labels = _columns(share), _labels(share)
            mine = slice(self.rank * len(share.rows), (self.rank + 1) * len(share.rows))
            text_ids = [t[mine] for t in text_ids]
        inputs = [self._tokenize(role, texts) for role, texts in columns.items()]
        return PairBatch(list(columns), inputs, text_ids, labels)

    def prompt_of(self, role: str) -> str:
        """The prompt of the column ``role`` (``"negative"`` 's for every ``negative_i``), ``""`` without one."""
        return self.prompts.get(role, self.prompts.get("negative", "") if role.startswith("negative_") else "")

    def _tokenize(self, role: str, texts: list[str]) -> dict[str, torch.Tensor]:
        prompt = self.prompt_of(role)
        # cut to what truncation keeps: the whole texts' tokens, at a cost bounded by the limit, not the texts
        texts = cut_texts(self.tokenizer, texts, self.max_length or self.tokenizer.model_max_length,
                          self.tokenizer.truncation_side, prefix=prompt)
        encoded = dict(self.tokenizer([prompt + t for t in texts], padding=True, truncation=True,
                                      max_length=self.max_length, return_tensors="pt").items())
        if prompt:  # for a pooling that leaves the prompt out (include_prompt false); one value per row
            from bertkit.sentence.model import prompt_tokens

            encoded["prompt_length"] = torch.full((len(texts),), prompt_tokens(self.tokenizer, prompt))
        return encoded


def _columns(batch: RowBatch) -> dict[str, list[str]]:
    """Role -> the batch's texts in that column; a negatives list becomes ``negative_1..k`` (every row of the
    batch must then hold the same number)."""
    first = batch.rows[0]
    columns = {role: [row[role] for row in batch.rows] for role in first if role not in ("negatives", "label")}
    if "negatives" in first:
        counts = {len(row["negatives"]) for row in batch.rows}
        if len(counts) > 1:
            at = [f"{w} ({len(row['negatives'])})" for w, row in zip(_rows(batch), batch.rows)]
            raise ValueError(f"{batch.source}: rows of one batch hold different numbers of negatives "
                             f"({', '.join(at)}); give every row the same number of negatives.")
        for k in range(counts.pop()):
            columns[f"negative_{k + 1}"] = [row["negatives"][k] for row in batch.rows]
    return columns


def _labels(batch: RowBatch) -> torch.Tensor | None:
    if "label" not in batch.rows[0]:
        return None
    values = [row["label"] for row in batch.rows]
    shapes = {len(v) if isinstance(v, list) else None for v in values}
    if len(shapes) > 1:
        raise ValueError(f"{batch.source}: rows of one batch mix single labels and lists of scores "
                         f"({', '.join(_rows(batch))}); give every row the same kind and number of labels.")
    return torch.tensor(values, dtype=torch.float32)


def _refuse_repeated_queries(batch: RowBatch) -> None:
    seen: dict[str, tuple[str, str]] = {}
    for place, row in zip(_rows(batch), batch.rows):
        query, positive = row["anchor"], row["positive"]
        if query in seen and seen[query][0] != positive:
            raise ValueError(f"{batch.source}: the query {query!r} comes with two different positives in one "
                             f"batch ({seen[query][1]} and {place}); in-batch negatives would make one positive "
                             "the other's negative: merge the rows into one with negatives, or allow it "
                             "(allow_repeated_queries=True, CLI --allow-repeated-queries).")
        seen.setdefault(query, (positive, place))


def _rows(batch: RowBatch) -> list[str]:
    """Where each row of the batch is, without the file's name (``"line 7"``, ``"row 7"``)."""
    prefix = f"{batch.source}, "
    return [place[len(prefix):] if place.startswith(prefix) else place for place in batch.where]
