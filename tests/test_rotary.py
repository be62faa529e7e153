"""bertkit.modeling.rotary against HF transformers' rope init functions and rotary application."""

from __future__ import annotations

import pytest
import torch
from transformers import GteConfig
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS
from transformers.models.gte.modeling_gte import GteRotaryEmbedding, apply_rotary_pos_emb

from bertkit import BERTConfig
from bertkit.modeling.rotary import rope_inverse_frequencies, rotary_tables, rotate

HEAD_DIM, MAX_POSITIONS = 14, 40  # odd-sized: 7 frequencies

CASES = {
    "default": {"rope_type": "default", "rope_theta": 1000.0},
    "linear": {"rope_type": "linear", "rope_theta": 10000.0, "factor": 2.5},
    "dynamic": {"rope_type": "dynamic", "rope_theta": 160000.0, "factor": 2.0},
    "yarn": {"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0, "original_max_position_embeddings": 16},
    "yarn-mscale": {"rope_type": "yarn", "rope_theta": 20000.0, "factor": 3.0, "beta_fast": 16, "beta_slow": 2,
                    "mscale": 0.8, "mscale_all_dim": 0.5, "original_max_position_embeddings": 20},
    "yarn-untruncated": {"rope_type": "yarn", "rope_theta": 500.0, "factor": 2.0, "truncate": False,
                         "original_max_position_embeddings": 24},
    "llama3": {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 1.0,
               "high_freq_factor": 4.0, "original_max_position_embeddings": 8},
    "partial": {"rope_type": "linear", "rope_theta": 10000.0, "factor": 2.0, "partial_rotary_factor": 0.5},
}


def hf_config(params: dict) -> GteConfig:
    return GteConfig(hidden_size=HEAD_DIM * 3, num_attention_heads=3, num_hidden_layers=1, intermediate_size=8,
                     vocab_size=50, max_position_embeddings=MAX_POSITIONS, rope_parameters=dict(params))


@pytest.mark.parametrize("name", sorted(CASES))
def test_inverse_frequencies_equal_hf(name):
    params = CASES[name]
    ours, scaling = rope_inverse_frequencies(params, HEAD_DIM, MAX_POSITIONS)
    theirs, hf_scaling = ROPE_INIT_FUNCTIONS[params["rope_type"]](hf_config(params)) if params["rope_type"] != \
        "default" else GteRotaryEmbedding.compute_default_rope_parameters(hf_config(params))
    assert ours.dtype == torch.float32 and ours.shape == theirs.shape
    torch.testing.assert_close(ours, theirs.float(), rtol=0, atol=1e-7)
    assert scaling == pytest.approx(hf_scaling, rel=1e-12)


@pytest.mark.parametrize("seq_len", [MAX_POSITIONS // 2, MAX_POSITIONS, 3 * MAX_POSITIONS + 1])
def test_dynamic_grows_with_the_sequence_as_hf(seq_len):
    params = CASES["dynamic"]
    ours, _ = rope_inverse_frequencies(params, HEAD_DIM, MAX_POSITIONS, seq_len=seq_len)
    theirs, _ = ROPE_INIT_FUNCTIONS["dynamic"](hf_config(params), seq_len=seq_len)
    torch.testing.assert_close(ours, theirs, rtol=0, atol=1e-7)
    if seq_len > MAX_POSITIONS:  # the scaling matters beyond the original length
        assert not torch.allclose(ours, rope_inverse_frequencies(params, HEAD_DIM, MAX_POSITIONS)[0])


@pytest.mark.parametrize("name", ["default", "yarn-mscale", "llama3"])
def test_tables_and_rotation_equal_hf(name):
    """cos/sin as HF's rotary embedding module gives them (attention scaling included) and RoPE applied to q/k."""
    params = CASES[name]
    config = hf_config(params)
    torch.manual_seed(0)
    position_ids = torch.tensor([[0, 1, 2, 3, 4, 37, 38], [5, 6, 7, 8, 9, 10, 11]])
    x = torch.randn(2, 3, 7, HEAD_DIM)
    cos, sin = rotary_tables(position_ids, *rope_inverse_frequencies(params, HEAD_DIM, MAX_POSITIONS), torch.float32)
    hf_cos, hf_sin = GteRotaryEmbedding(config)(x, position_ids)
    torch.testing.assert_close(cos, hf_cos, rtol=0, atol=2e-6)
    torch.testing.assert_close(sin, hf_sin, rtol=0, atol=2e-6)
    hf_q, _ = apply_rotary_pos_emb(x, x, hf_cos, hf_sin)
    torch.testing.assert_close(rotate(x, cos, sin), hf_q, rtol=0, atol=2e-5)


def test_partial_rotation_passes_the_rest():
    torch.manual_seed(0)
    x = torch.randn(1, 2, 5, 12)
    inv_freq, scaling = rope_inverse_frequencies(CASES["partial"], 12, MAX_POSITIONS)
    assert inv_freq.shape == (3,)  # int(12 * 0.5) = 6 rotated features
    cos, sin = rotary_tables(torch.arange(5)[None], inv_freq, scaling, torch.float32)
    out = rotate(x, cos, sin)
    torch.testing.assert_close(out[..., 6:], x[..., 6:], rtol=0, atol=0)
    torch.testing.assert_close(out[..., :6], rotate(x[..., :6], cos, sin), rtol=0, atol=0)


def test_bad_rope_parameters_are_one_line():
    with pytest.raises(ValueError, match="rope_type='longrope' is not supported"):
        rope_inverse_frequencies({"rope_type": "longrope", "rope_theta": 1.0}, 8, 16)
    with pytest.raises(ValueError, match="needs rope_parameters key 'factor'"):
        rope_inverse_frequencies({"rope_type": "linear", "rope_theta": 1.0}, 8, 16)
    with pytest.raises(ValueError, match="rope_scaling rope_type='ntk' is not supported"):
        BERTConfig(rope_scaling={"type": "ntk", "factor": 2.0})
    with pytest.raises(ValueError, match="needs the number 'low_freq_factor'"):
        BERTConfig(rope_scaling={"rope_type": "llama3", "factor": 2.0})
    with pytest.raises(ValueError, match="rope_theta must be > 0"):
        BERTConfig(rope_theta=0.0)
