"""The masking functions under their earlier name: they live in the leaf :mod:`bertkit.masking`.

``data`` uses masking too and must not import ``modeling`` (design §2), so the one
implementation sits below both; this module only re-exports it.
"""

from bertkit.masking import continuation_table, mask_tokens, whole_word_ids

__all__ = ["continuation_table", "mask_tokens", "whole_word_ids"]
