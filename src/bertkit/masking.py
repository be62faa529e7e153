"""BERT's masked-LM corruption: the one masking implementation in bertkit.

``BERTForPreTraining.create_masked_lm_inputs`` and ``BERTForMaskedLM.create_masked_lm_inputs``
(:mod:`bertkit.modeling`), the pretraining collator (dynamic masking) and shard creation
(Google's static masking) in :mod:`bertkit.data` all call :func:`mask_tokens`.

A leaf module, like :mod:`bertkit.io`: it needs only torch and imports nothing from bertkit, so
both ``modeling`` and ``data`` can use it while neither imports the other (design §2).
``bertkit.modeling.masking`` re-exports it under its earlier name.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch


def mask_tokens(input_ids: torch.Tensor, *, vocab_size: int, mask_token_id: int,
                attention_mask: torch.Tensor | None = None, special_tokens_mask: torch.Tensor | None = None,
                special_token_ids: Sequence[int] = (), mlm_probability: float = 0.15,
                mask_replace_prob: float = 0.8, random_replace_prob: float = 0.1, ignore_index: int = -100,
                generator: torch.Generator | None = None, max_predictions: int | None = None,
                whole_word: bool = False, word_ids: torch.Tensor | None = None,
                exact_count: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """Select each eligible token (or whole word) with probability ``mlm_probability`` and corrupt it.

    Of the selected tokens, ``mask_replace_prob`` become ``mask_token_id``,
    ``random_replace_prob`` a random id that is not special, and the rest stay unchanged
    (one draw per token, also within a whole word). Never selected: padding
    (``attention_mask == 0``), positions flagged in ``special_tokens_mask``, and, when no
    ``special_tokens_mask`` is given, any token whose id is in ``special_token_ids``.

    ``whole_word=True`` selects words instead of tokens: ``word_ids`` ``[B, L]`` (see
    :func:`whole_word_ids`) gives each token a word id, and a run of neighbouring tokens with
    the same id is one word; a selected word has every eligible piece selected.
    ``max_predictions`` caps the selected tokens per row: selected words are visited in a
    random order and kept while they fit (a word that does not fit is skipped, never split).
    ``exact_count=True`` is Google's static masking: instead of a coin per word, each row
    gets exactly ``min(max_predictions, max(1, round(n * mlm_probability)))`` predictions
    (``n`` = its non-padding tokens, specials included, as Google counts them), filled with
    words in a random order the same way.

    Returns ``(masked_input_ids, labels)``: labels hold the original id at selected
    positions and ``ignore_index`` elsewhere. ``input_ids`` is not modified.
    """
    for name, p in (("mlm_probability", mlm_probability), ("mask_replace_prob", mask_replace_prob),
                    ("random_replace_prob", random_replace_prob)):
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"{name} must lie in [0, 1], got {p}.")
    if mask_replace_prob + random_replace_prob > 1.0:
        raise ValueError(f"mask_replace_prob + random_replace_prob must be <= 1, got "
                         f"{mask_replace_prob} + {random_replace_prob}.")
    if not 0 <= mask_token_id < vocab_size:
        raise ValueError(f"mask_token_id={mask_token_id} is outside the vocabulary [0, {vocab_size}).")
    if max_predictions is not None and max_predictions < 0:
        raise ValueError(f"max_predictions must be >= 0 or None, got {max_predictions}.")
    if whole_word != (word_ids is not None):
        raise ValueError("whole_word=True needs word_ids (see whole_word_ids), and word_ids is used only "
                         "with whole_word=True.")
    if word_ids is not None and word_ids.shape != input_ids.shape:
        raise ValueError(f"word_ids has shape {tuple(word_ids.shape)}; input_ids has {tuple(input_ids.shape)}.")
    device = input_ids.device

    eligible = torch.ones_like(input_ids, dtype=torch.bool)
    if attention_mask is not None:
        eligible &= attention_mask.to(device) != 0
    if special_tokens_mask is not None:
        eligible &= special_tokens_mask.to(device) == 0
    elif special_token_ids:
        eligible &= ~torch.isin(input_ids, torch.tensor(list(special_token_ids), device=device))

    def uniform() -> torch.Tensor:
        return torch.rand(input_ids.shape, generator=generator, device=device)

    # a "unit" is what is selected as one: a token, or with whole_word a word ([B, L] unit index < L)
    units = _word_runs(word_ids.to(device)) if whole_word else torch.arange(input_ids.shape[-1], device=device)
    units = units.expand_as(input_ids)
    if exact_count:
        selected = eligible
        lengths = eligible.sum(-1) if attention_mask is None else (attention_mask.to(device) != 0).sum(-1)
        budget = (lengths * mlm_probability).round().long().clamp(min=1)
        if max_predictions is not None:
            budget = budget.clamp(max=max_predictions)
    else:
        selected = eligible & (uniform().gather(-1, units) < mlm_probability)
        budget = None if max_predictions is None else torch.full(input_ids.shape[:-1], max_predictions, device=device)
    if budget is not None:
        selected = _fill_budget(selected, units, budget, uniform())
    labels = torch.where(selected, input_ids, torch.full_like(input_ids, ignore_index))

    draw = uniform()  # one draw decides mask / random / keep for every selected token
    to_mask = selected & (draw < mask_replace_prob)
    to_random = selected & (draw >= mask_replace_prob) & (draw < mask_replace_prob + random_replace_prob)

    masked = input_ids.masked_fill(to_mask, mask_token_id)
    candidates = _non_special_ids(vocab_size, special_token_ids, device)
    picks = torch.randint(len(candidates), input_ids.shape, generator=generator, device=device)
    return torch.where(to_random, candidates[picks], masked), labels


def whole_word_ids(input_ids: torch.Tensor, continuation: torch.Tensor) -> torch.Tensor:
    """Word ids ``[B, L]`` for :func:`mask_tokens`: a ``##`` piece belongs to the preceding token's word.

    ``continuation`` is a boolean ``[vocab_size]`` table, True for ids whose token starts
    with ``##`` (build it with :func:`continuation_table`).
    """
    starts = ~continuation.to(input_ids.device)[input_ids]
    return starts.long().cumsum(-1)


def continuation_table(vocab: Mapping[str, int] | Sequence[str], prefix: str = "##") -> torch.Tensor:
    """Boolean ``[vocab_size]``: True where the token continues a word (starts with ``prefix``)."""
    items = vocab.items() if isinstance(vocab, Mapping) else ((t, i) for i, t in enumerate(vocab))
    table = torch.zeros(len(vocab), dtype=torch.bool)
    ids = [i for t, i in items if t.startswith(prefix)]
    if ids:
        table[torch.tensor(ids)] = True
    return table


def _word_runs(word_ids: torch.Tensor) -> torch.Tensor:
    """Renumber word ids as 0, 1, ... per row, a new word wherever the id changes (so ids may restart per segment)."""
    changes = torch.ones_like(word_ids, dtype=torch.long)
    changes[..., 1:] = (word_ids[..., 1:] != word_ids[..., :-1]).long()
    return changes.cumsum(-1) - 1


def _fill_budget(selected: torch.Tensor, units: torch.Tensor, budget: torch.Tensor,
                 priority: torch.Tensor) -> torch.Tensor:
    """Keep selected units in ``priority`` order while they fit ``budget`` tokens per row; skip those that don't.

    Greedy like Google's loop, vectorised over rows: each pass takes the longest prefix of
    the still-undecided units (in order) that fits and rejects units larger than what is
    left, so every pass decides at least one unit per row.
    """
    sizes = torch.zeros(selected.shape, dtype=torch.long, device=selected.device)
    sizes.scatter_add_(-1, units, selected.long())  # [B, L]: selected tokens of each unit
    order = torch.where(sizes > 0, priority, 2.0).argsort(-1)  # units by priority; empty ones last
    sizes = sizes.gather(-1, order)
    undecided, kept = sizes > 0, torch.zeros_like(sizes, dtype=torch.bool)
    left = budget.clone()
    while True:
        undecided &= sizes <= left[..., None]
        if not undecided.any():
            break
        fits = undecided & ((sizes * undecided).cumsum(-1) <= left[..., None])
        kept |= fits
        undecided &= ~fits
        left -= (sizes * fits).sum(-1)
    keep_unit = torch.zeros_like(kept).scatter(-1, order, kept)
    return selected & keep_unit.gather(-1, units)


def _non_special_ids(vocab_size: int, special_token_ids: Sequence[int], device) -> torch.Tensor:
    keep = torch.ones(vocab_size, dtype=torch.bool, device=device)
    if special_token_ids:
        keep[torch.tensor(list(special_token_ids), device=device)] = False
    return keep.nonzero().squeeze(1)
