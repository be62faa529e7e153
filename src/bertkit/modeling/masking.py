"""BERT's masked-LM corruption: the one masking implementation in bertkit.

``BERTForPreTraining.create_masked_lm_inputs``, ``BERTForMaskedLM.create_masked_lm_inputs``
and the pretraining collator all call :func:`mask_tokens`.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch


def mask_tokens(input_ids: torch.Tensor, *, vocab_size: int, mask_token_id: int,
                attention_mask: torch.Tensor | None = None, special_tokens_mask: torch.Tensor | None = None,
                special_token_ids: Sequence[int] = (), mlm_probability: float = 0.15,
                mask_replace_prob: float = 0.8, random_replace_prob: float = 0.1, ignore_index: int = -100,
                generator: torch.Generator | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Select each eligible token with probability ``mlm_probability`` and corrupt it.

    Of the selected tokens, ``mask_replace_prob`` become ``mask_token_id``,
    ``random_replace_prob`` a random id that is not special, and the rest stay unchanged.
    Never selected: padding (``attention_mask == 0``), positions flagged in
    ``special_tokens_mask``, and, when no ``special_tokens_mask`` is given, any token whose
    id is in ``special_token_ids``.

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

    selected = eligible & (uniform() < mlm_probability)
    labels = torch.where(selected, input_ids, torch.full_like(input_ids, ignore_index))

    draw = uniform()  # one draw decides mask / random / keep for every selected token
    to_mask = selected & (draw < mask_replace_prob)
    to_random = selected & (draw >= mask_replace_prob) & (draw < mask_replace_prob + random_replace_prob)

    masked = input_ids.masked_fill(to_mask, mask_token_id)
    candidates = _non_special_ids(vocab_size, special_token_ids, device)
    picks = torch.randint(len(candidates), input_ids.shape, generator=generator, device=device)
    return torch.where(to_random, candidates[picks], masked), labels


def _non_special_ids(vocab_size: int, special_token_ids: Sequence[int], device) -> torch.Tensor:
    keep = torch.ones(vocab_size, dtype=torch.bool, device=device)
    if special_token_ids:
        keep[torch.tensor(list(special_token_ids), device=device)] = False
    return keep.nonzero().squeeze(1)
