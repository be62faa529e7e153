"""Helpers shared by the ``tests/test_ppb_compat_*.py`` files (bertkit.compat.pytorch_pretrained_bert vs 0.6.2).

Models are built in both libraries on the tiny odd config of ``ppb_reference`` (vocab 99,
hidden 36, 3 heads, inner 37, 2 layers, 40 positions, 3 token types): ppb's weights
randomised and copied into ours with ``load_state_dict(strict=True)``.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

import bertkit.compat.pytorch_pretrained_bert as P
from ppb_reference import HEADS, PPB_CONFIG, build_ppb

ATOL = 1e-5
CLASSES = list(HEADS)

#: every test_ppb_compat_* module's ``pytestmark``: ppb 0.6.2's BertAdam calls a deprecated ``add_`` overload
IGNORE_PPB_ADD_WARNING = pytest.mark.filterwarnings("ignore:This overload of add_ is deprecated:UserWarning")


def build_pair(head_name: str, seed: int = 0) -> tuple[nn.Module, nn.Module]:
    """(ours, ppb's): the ppb model randomised, its state dict loaded strictly into ours; both in eval mode."""
    head = HEADS[head_name]
    reference = build_ppb(head, seed)
    ours = getattr(P, head.ppb_class)(P.BertConfig(**PPB_CONFIG), *head.ppb_args)
    ours.load_state_dict(reference.state_dict(), strict=True)
    return ours.eval(), reference


def tensors(out) -> list[torch.Tensor]:
    """The tensors of a (nested) output in order."""
    if isinstance(out, torch.Tensor):
        return [out]
    return [t for item in out for t in tensors(item)]


def batch_args(batch) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    return batch.input_ids, batch.token_type_ids, batch.attention_mask  # ppb's positional order


def assert_all_close(got, want, atol=ATOL):
    """Every tensor of ``got`` (nested tuples / lists) close to the one in the same place of ``want``."""
    # pytest rewrites asserts in test modules only: the messages say what its introspection would
    got, want = tensors(got), tensors(want)
    assert len(got) == len(want), f"{len(got)} tensors, expected {len(want)}"
    for i, (g, w) in enumerate(zip(got, want)):
        assert g.shape == w.shape, f"output {i}: shape {tuple(g.shape)}, expected {tuple(w.shape)}"
        torch.testing.assert_close(g, w, atol=atol, rtol=atol, msg=lambda m, i=i: f"output {i}: {m}")
