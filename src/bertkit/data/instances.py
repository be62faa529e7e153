"""Pretraining instances the way Google's ``create_pretraining_data.py`` builds them.

The pipeline, top to bottom:

1. :func:`tokenize_documents`: documents (lists of sentences) become one flat array of
   token ids with sentence and document offsets; sentences and documents that tokenize
   to nothing are dropped. The tokenizer sees whole batches of sentences.
2. :func:`create_instance_spans`: Google's document-aware pairing. Documents are shuffled;
   for each of ``dupe_factor`` passes over them, each document is cut into chunks of
   sentences up to a target length (``max_seq_length - 3``, or with probability
   ``short_seq_prob`` a random target in ``[2, max_seq_length - 3]``, drawn once per
   document and pass as Google does); a chunk's first ``a_end`` sentences are segment A and
   segment B is the rest of the chunk (NSP label 0) or, half the time (always when the
   chunk is one sentence), sentences from a random other document (label 1), in which
   case the unused sentences of the chunk go back to be used by the next chunk. Each pair
   is then cut to ``max_seq_length - 3`` tokens by :func:`truncation_amounts`, and all
   instances are shuffled. A and B are contiguous in the flat token array, so an instance
   is just four offsets and a label.
3. :func:`assemble`: ``[CLS] A [SEP] B [SEP]`` rows, vectorised, in the shard layout.
4. :func:`mask_statically`: Google's static masking through the project's one masking
   function, :func:`bertkit.masking.mask_tokens` (``exact_count=True``).

Three seeded streams make the output a function of ``seed``: ``random.Random(seed)`` for
pairing, ``numpy.random.default_rng(seed)`` for truncation and the final shuffle, and a
``torch.Generator`` (seeded by the caller) for masking.
"""

from __future__ import annotations

import bisect
import itertools
import random
import warnings
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:  # torch is imported by static masking only: data creation workers run without it
    import torch


@dataclass(frozen=True)
class TokenizedCorpus:
    """Every sentence's token ids in one array. Document ``d`` holds sentences
    ``document_starts[d] : document_starts[d + 1]``; sentence ``s`` is
    ``tokens[sentence_starts[s] : sentence_starts[s + 1]]`` (never empty)."""

    tokens: np.ndarray  # [T] int32
    sentence_starts: np.ndarray  # [S + 1] int64
    document_starts: np.ndarray  # [D + 1] int64

    @property
    def num_documents(self) -> int:
        return len(self.document_starts) - 1

    def sentence(self, s: int) -> np.ndarray:
        return self.tokens[self.sentence_starts[s]:self.sentence_starts[s + 1]]


@dataclass(frozen=True)
class InstanceSpans:
    """Instances as half-open token ranges of a :class:`TokenizedCorpus`: A = ``tokens[a_start:a_end]``,
    B = ``tokens[b_start:b_end]``; ``is_random_next`` is the NSP label (1 = random B)."""

    a_start: np.ndarray
    a_end: np.ndarray
    b_start: np.ndarray
    b_end: np.ndarray
    is_random_next: np.ndarray  # [N] bool

    def __len__(self) -> int:
        return len(self.a_start)

    def take(self, index) -> InstanceSpans:
        return InstanceSpans(*(getattr(self, f)[index] for f in self.__dataclass_fields__))


@dataclass(frozen=True)
class InstanceBatch:
    """Instances in the shard layout: ``tokens[offsets[i]:offsets[i + 1]]`` is ``[CLS] A [SEP] B [SEP]``
    of instance ``i``; B starts at ``segment_starts[i]`` (= len(A) + 2). With static masking,
    ``tokens`` are already corrupted and instance ``i`` predicts ``masked_labels`` (original
    ids) at ``masked_positions`` (within the instance, ascending), slice
    ``masked_offsets[i]:masked_offsets[i + 1]``."""

    tokens: np.ndarray  # [T]
    offsets: np.ndarray  # [N + 1] int64
    segment_starts: np.ndarray  # [N]
    nsp_labels: np.ndarray  # [N] uint8
    masked_positions: np.ndarray | None = None  # [P]
    masked_labels: np.ndarray | None = None  # [P]
    masked_offsets: np.ndarray | None = None  # [N + 1] int64

    def __len__(self) -> int:
        return len(self.offsets) - 1


# ---------------------------------------------------------------------------- 1. tokenize

def tokenize_documents(documents: Iterable[Sequence[str]], tokenizer, *, batch_size: int = 8192,
                       progress: bool = False) -> TokenizedCorpus:
    """Tokenize every sentence (no special tokens), ``batch_size`` sentences per tokenizer call."""
    from bertkit.progress import progress_bar

    pieces: list[np.ndarray] = []
    lengths: list[np.ndarray] = []
    owners: list[np.ndarray] = []  # the document of each sentence
    pending: list[str] = []
    pending_owner: list[int] = []

    def flush() -> None:
        ids = tokenizer(pending, add_special_tokens=False, return_token_type_ids=False,
                        return_attention_mask=False)["input_ids"]
        sizes = np.fromiter(map(len, ids), dtype=np.int64, count=len(ids))
        pieces.append(np.fromiter(itertools.chain.from_iterable(ids), dtype=np.int32, count=int(sizes.sum())))
        keep = sizes > 0  # a sentence of nothing but spaces or control characters
        lengths.append(sizes[keep])
        owners.append(np.asarray(pending_owner, dtype=np.int64)[keep])
        pending.clear()
        pending_owner.clear()

    for d, document in enumerate(progress_bar(documents, desc="tokenizing", unit=" documents", disable=not progress)):
        pending.extend(document)
        pending_owner.extend([d] * len(document))
        if len(pending) >= batch_size:
            flush()
    if pending:
        flush()
    if not lengths:
        return TokenizedCorpus(np.zeros(0, np.int32), np.zeros(1, np.int64), np.zeros(1, np.int64))
    sentence_lengths, owner = np.concatenate(lengths), np.concatenate(owners)
    sentences_per_document = np.unique(owner, return_counts=True)[1]  # documents left with no sentence vanish
    return TokenizedCorpus(tokens=np.concatenate(pieces),
                           sentence_starts=np.concatenate([[0], np.cumsum(sentence_lengths)]),
                           document_starts=np.concatenate([[0], np.cumsum(sentences_per_document)]))


# ---------------------------------------------------------------------------- 2. pair sentences

def create_instance_spans(corpus: TokenizedCorpus, *, max_seq_length: int = 128, short_seq_prob: float = 0.1,
                          dupe_factor: int = 1, seed: int = 12345, random_next_prob: float = 0.5) -> InstanceSpans:
    """Google's sentence pairs with NSP labels, truncated to fit ``max_seq_length`` and shuffled."""
    if max_seq_length < 5:
        raise ValueError(f"max_seq_length must be >= 5 ([CLS] A [SEP] B [SEP] with A, B >= 1), got {max_seq_length}.")
    if not 0.0 <= short_seq_prob <= 1.0:
        raise ValueError(f"short_seq_prob must lie in [0, 1], got {short_seq_prob}.")
    if not 0.0 <= random_next_prob <= 1.0:
        raise ValueError(f"random_next_prob must lie in [0, 1], got {random_next_prob}.")
    if dupe_factor < 1:
        raise ValueError(f"dupe_factor must be >= 1, got {dupe_factor}.")
    if corpus.num_documents == 0:
        raise ValueError("the corpus holds no words after tokenization (empty files, or only white space and "
                         "control characters): there is nothing to build instances from.")
    if corpus.num_documents == 1:
        warnings.warn("the corpus is a single document, so random-next segments (NSP label 1) come from that "
                      "same document; give it several documents.", stacklevel=2)
    rng = random.Random(seed)
    order = list(range(corpus.num_documents))
    rng.shuffle(order)
    starts = corpus.sentence_starts.tolist()
    documents = corpus.document_starts.tolist()
    rows: list[tuple[int, int, int, int, bool]] = []
    for _ in range(dupe_factor):
        for d in order:
            rows.extend(_pairs_from_document(starts, documents, d, max_seq_length - 3, short_seq_prob, rng,
                                             random_next_prob))
    a_start, a_end, b_start, b_end, is_random = (np.asarray(c) for c in zip(*rows))
    np_rng = np.random.default_rng(seed)
    cuts = truncation_amounts(a_end - a_start, b_end - b_start, max_seq_length - 3, np_rng)
    spans = InstanceSpans(a_start + cuts[0], a_end - cuts[1], b_start + cuts[2], b_end - cuts[3],
                          is_random.astype(bool))
    return spans.take(np_rng.permutation(len(spans)))


def _pairs_from_document(starts: list[int], documents: list[int], d: int, max_num_tokens: int,
                         short_seq_prob: float, rng: random.Random,
                         random_next_prob: float = 0.5) -> list[tuple[int, int, int, int, bool]]:
    """Google's ``create_instances_from_document`` on sentence indices; yields untruncated token spans.

    B is a random other document's text with ``random_next_prob`` (Google: 0.5), and always
    when the chunk is one sentence — except with ``random_next_prob=0`` (contiguous text, for
    training without NSP), where a one-sentence chunk is cut in two halves instead."""
    first, end = documents[d], documents[d + 1]  # sentences of document d
    target = max_num_tokens
    if rng.random() < short_seq_prob:
        target = rng.randint(2, max_num_tokens)
    pairs = []
    chunk_start, chunk_tokens, i = first, 0, first
    while i < end:
        chunk_tokens += starts[i + 1] - starts[i]
        if i == end - 1 or chunk_tokens >= target:
            n_sentences = i - chunk_start + 1
            a_end = 1 if n_sentences == 1 else rng.randint(1, n_sentences - 1)
            a = (starts[chunk_start], starts[chunk_start + a_end])
            if n_sentences == 1 and random_next_prob == 0.0 and a[1] - starts[chunk_start] > 1:
                # B always follows A: a lone sentence is cut in two rather than paired with a stranger
                middle = (starts[chunk_start] + starts[chunk_start + 1]) // 2
                pairs.append((starts[chunk_start], middle, middle, starts[chunk_start + 1], False))
            elif n_sentences == 1 or rng.random() < random_next_prob:
                b = _random_segment(starts, documents, d, target - (a[1] - a[0]), rng)
                pairs.append((*a, *b, True))
                i -= n_sentences - a_end  # put the unused sentences back for the next chunk
            else:
                pairs.append((*a, starts[chunk_start + a_end], starts[i + 1], False))
            chunk_start, chunk_tokens = i + 1, 0
        i += 1
    return pairs


def _random_segment(starts: list[int], documents: list[int], d: int, target_b: int,
                    rng: random.Random) -> tuple[int, int]:
    """Sentences of a random other document, from a random one on, until ``target_b`` tokens (at least one)."""
    n_documents = len(documents) - 1
    other = d
    if n_documents > 1:  # uniform over the other documents (Google retries up to 10 times instead)
        other = rng.randint(0, n_documents - 2)
        other += other >= d
    first, end = documents[other], documents[other + 1]
    s = rng.randint(first, end - 1)
    # the first sentence j >= s whose end reaches target_b tokens from starts[s], else the document's last
    stop = bisect.bisect_left(starts, starts[s] + target_b, lo=s + 1, hi=end)
    return starts[s], starts[stop]


def truncation_amounts(len_a, len_b, max_num_tokens: int, rng: np.random.Generator):
    """Google's ``truncate_seq_pair`` in closed form: ``(front_a, back_a, front_b, back_b)`` tokens to cut.

    Google removes one token at a time from the longer segment (B on a tie), from its front
    or back with probability 1/2 each, until ``len_a + len_b <= max_num_tokens``. Which
    segment loses how many tokens does not depend on the coin, so it is computed directly,
    and each segment's front/back split is one binomial draw. Works on scalars or arrays.
    """
    len_a, len_b = np.asarray(len_a, dtype=np.int64), np.asarray(len_b, dtype=np.int64)
    excess = np.maximum(len_a + len_b - max_num_tokens, 0)
    levelling = np.minimum(excess, np.abs(len_a - len_b))  # first the longer one down to the other's length
    rest = excess - levelling  # then alternately, B first (a tie truncates B)
    cut_a = np.where(len_a > len_b, levelling, 0) + rest // 2
    cut_b = np.where(len_a > len_b, 0, levelling) + rest - rest // 2
    front_a, front_b = rng.binomial(cut_a, 0.5), rng.binomial(cut_b, 0.5)
    return front_a, cut_a - front_a, front_b, cut_b - front_b


def truncate_seq_pair(tokens_a: Sequence, tokens_b: Sequence, max_num_tokens: int,
                      rng: np.random.Generator) -> tuple[list, list]:
    """Truncated copies of one pair, as Google's ``truncate_seq_pair`` leaves them (see :func:`truncation_amounts`)."""
    front_a, back_a, front_b, back_b = (int(x) for x in truncation_amounts(len(tokens_a), len(tokens_b),
                                                                           max_num_tokens, rng))
    return list(tokens_a[front_a:len(tokens_a) - back_a]), list(tokens_b[front_b:len(tokens_b) - back_b])


# ---------------------------------------------------------------------------- 3. assemble rows

def assemble(corpus: TokenizedCorpus, spans: InstanceSpans, *, cls_token_id: int, sep_token_id: int,
             dtype=np.int32) -> InstanceBatch:
    """``[CLS] A [SEP] B [SEP]`` for every instance, built with one gather (no loop over instances)."""
    len_a, len_b = spans.a_end - spans.a_start, spans.b_end - spans.b_start
    sizes = len_a + len_b + 3
    offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    row = np.repeat(np.arange(len(spans)), sizes)  # [T] instance of each output token
    pos = np.arange(offsets[-1]) - offsets[:-1][row]  # [T] position within its instance
    la, a0, b0 = len_a[row], spans.a_start[row], spans.b_start[row]
    cls_index, sep_index = len(corpus.tokens), len(corpus.tokens) + 1
    source = np.where(pos <= la, a0 + pos - 1, b0 + pos - la - 2)  # A at 1..la, B from la + 2
    source = np.where(pos == 0, cls_index, source)
    source = np.where((pos == la + 1) | (pos == sizes[row] - 1), sep_index, source)
    table = np.concatenate([corpus.tokens, np.asarray([cls_token_id, sep_token_id], dtype=corpus.tokens.dtype)])
    return InstanceBatch(tokens=table[source].astype(dtype), offsets=offsets,
                         segment_starts=(len_a + 2).astype(np.int32),
                         nsp_labels=spans.is_random_next.astype(np.uint8))


# ---------------------------------------------------------------------------- 4. static masking

def mask_statically(batch: InstanceBatch, *, vocab_size: int, mask_token_id: int, special_token_ids: Sequence[int],
                    masked_lm_prob: float = 0.15, max_predictions_per_seq: int = 20,
                    continuation: torch.Tensor | None = None, generator: torch.Generator | None = None,
                    rows_per_call: int = 4096) -> InstanceBatch:
    """Google's static masking: exactly ``min(max_predictions_per_seq, max(1, round(len * masked_lm_prob)))``
    predictions per instance (whole words when ``continuation``, the ``##`` table, is given), 80/10/10.

    Returns a copy of ``batch`` with corrupted tokens and the masked positions and labels.
    """
    import torch

    from bertkit.masking import mask_tokens, whole_word_ids

    sizes = np.diff(batch.offsets)
    row = np.repeat(np.arange(len(batch)), sizes)
    col = np.arange(len(batch.tokens)) - batch.offsets[:-1][row]
    new_tokens = batch.tokens.copy()
    positions, labels, counts = [], [], []
    for lo in range(0, len(batch), rows_per_call):
        hi = min(lo + rows_per_call, len(batch))
        t0, t1 = batch.offsets[lo], batch.offsets[hi]
        r, c = torch.from_numpy(row[t0:t1] - lo), torch.from_numpy(col[t0:t1])
        ids = torch.zeros(hi - lo, int(sizes[lo:hi].max()), dtype=torch.long)  # padded rows
        ids[r, c] = torch.from_numpy(batch.tokens[t0:t1].astype(np.int64))
        attention = torch.zeros_like(ids)
        attention[r, c] = 1
        word_ids = None if continuation is None else whole_word_ids(ids, continuation)
        masked, mlm_labels = mask_tokens(
            ids, vocab_size=vocab_size, mask_token_id=mask_token_id, attention_mask=attention,
            special_token_ids=special_token_ids, mlm_probability=masked_lm_prob, generator=generator,
            max_predictions=max_predictions_per_seq, whole_word=continuation is not None, word_ids=word_ids,
            exact_count=True)
        new_tokens[t0:t1] = masked[r, c].numpy()
        hit_row, hit_col = (mlm_labels != -100).nonzero(as_tuple=True)  # row-major: ascending positions
        positions.append(hit_col.numpy())
        labels.append(mlm_labels[hit_row, hit_col].numpy())
        counts.append(np.bincount(hit_row.numpy(), minlength=hi - lo))
    counts_all = np.concatenate(counts) if counts else np.zeros(0, np.int64)
    return InstanceBatch(tokens=new_tokens, offsets=batch.offsets, segment_starts=batch.segment_starts,
                         nsp_labels=batch.nsp_labels,
                         masked_positions=np.concatenate(positions or [np.zeros(0)]).astype(batch.segment_starts.dtype),
                         masked_labels=np.concatenate(labels or [np.zeros(0)]).astype(batch.tokens.dtype),
                         masked_offsets=np.concatenate([[0], np.cumsum(counts_all)]).astype(np.int64))
