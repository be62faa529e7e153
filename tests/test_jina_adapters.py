"""Jina embeddings v3's task LoRA adapters (:mod:`bertkit.weights.task_adapters`): the original layout read as HF's
port, one task merged into the weights at load, or the base weights without a task.

The merged weights are checked against a forward that applies the adapters unmerged (``x W^T + s (x A^T) B^T``,
``jina_original.unmerged_hooks``), in HF's ``JinaEmbeddingsV3Model`` (a test-only dependency; no network).
"""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file, save_file

pytest.importorskip("transformers")

import transformers

from bertkit.config import BERTConfig
from bertkit.weights import task_adapters
from bertkit.weights.formats import read_checkpoint
from conftest import randomize_
from jina_original import TASKS, unmerged_hooks, write_original

transformers.logging.set_verbosity_error()

TOL = dict(atol=2e-5, rtol=2e-5)
SIZES = dict(vocab_size=99, hidden_size=36, num_hidden_layers=2, num_attention_heads=3, intermediate_size=26,
             type_vocab_size=1, max_position_embeddings=64, pad_token_id=1, bos_token_id=0, eos_token_id=2,
             rope_parameters={"rope_type": "default", "rope_theta": 500.0})


def port_model(seed: int = 0):
    config = transformers.JinaEmbeddingsV3Config(**SIZES, attn_implementation="eager")
    return randomize_(transformers.JinaEmbeddingsV3Model(config), seed=seed, std=0.1,
                      norms=r"(LayerNorm|layernorm|layer_norm|_ln)\.weight$").eval()


def batch():
    g = torch.Generator().manual_seed(5)
    ids = torch.randint(3, 99, (3, 9), generator=g)
    mask = torch.ones(3, 9, dtype=torch.long)
    mask[1, 6:] = 0
    ids[1, 6:] = 1
    return ids, mask


@pytest.mark.parametrize("rank,alpha", [(4, 1.0), (3, 5.0)])
def test_merged_task_equals_the_unmerged_adapters(tmp_path, rank, alpha):
    """The merged tensors, written as HF's port and loaded by HF's own class, give what the adapters give
    unmerged (the hooks) on the base weights."""
    hf = port_model()
    state = write_original(tmp_path / "original", hf, rank=rank, alpha=alpha)
    ids, mask = batch()
    for task in ("retrieval.query", "text-matching"):
        port = _merged_in_hf(tmp_path / "original", task, tmp_path / task, hf.config)
        reference = port_model()
        handles = unmerged_hooks(reference, state, task, alpha / rank)
        with torch.no_grad():
            got, want = port(ids, mask), reference(ids, mask)
        for h in handles:
            h.remove()
        torch.testing.assert_close(got.last_hidden_state[mask.bool()], want.last_hidden_state[mask.bool()], **TOL)
        torch.testing.assert_close(got.pooler_output, want.pooler_output, **TOL)


def _merged(directory, task):
    """bertkit's reading of an original directory's tensors with ``task`` merged (before the family table)."""
    raw = json.loads((directory / "config.json").read_text())
    return task_adapters.read_original(raw, load_file(str(directory / "model.safetensors")), task, directory)


def _merged_in_hf(directory, task, out, config):
    """The merged tensors written beside HF's config and loaded by ``JinaEmbeddingsV3Model`` (nothing missing)."""
    out.mkdir()
    save_file(_merged(directory, task), str(out / "model.safetensors"))
    config.save_pretrained(out)
    model, info = transformers.JinaEmbeddingsV3Model.from_pretrained(out, output_loading_info=True)
    assert not any(info[k] for k in ("missing_keys", "unexpected_keys", "mismatched_keys")), info
    return model.eval()


def test_no_task_is_the_base_weights(tmp_path):
    hf = port_model()
    write_original(tmp_path / "original", hf)
    hf.save_pretrained(tmp_path / "hf")
    base = {"roberta." + k: v for k, v in load_file(str(tmp_path / "hf" / "model.safetensors")).items()}
    merged = _merged(tmp_path / "original", None)
    assert set(merged) == set(base)
    for name, value in merged.items():
        assert torch.equal(value, base[name]), name


def test_every_task_differs(tmp_path):
    write_original(tmp_path, port_model())
    weights = [_merged(tmp_path, task)["roberta.encoder.layers.0.mixer.Wqkv.weight"] for task in TASKS]
    for i in range(len(TASKS)):
        for j in range(i):
            assert not torch.allclose(weights[i], weights[j])


def test_original_config_reads_as_the_port(tmp_path):
    write_original(tmp_path, port_model())
    config = BERTConfig.from_json_file(tmp_path / "config.json")
    assert config.family == "jina_embeddings_v3"
    assert (config.hidden_size, config.num_hidden_layers, config.type_vocab_size) == (36, 2, 1)


def test_unknown_task_lists_the_tasks(tmp_path):
    write_original(tmp_path, port_model())
    with pytest.raises(ValueError, match="task='retrieval' is not one of the task adapters") as e:
        read_checkpoint(tmp_path, task="retrieval")
    assert ", ".join(TASKS) in str(e.value) and len(str(e.value).splitlines()) == 1


def test_task_without_adapters_is_refused(tmp_path):
    port_model().save_pretrained(tmp_path)
    with pytest.raises(ValueError, match="has no task adapters") as e:
        read_checkpoint(tmp_path, task="retrieval.query")
    assert "Leave task out" in str(e.value) and len(str(e.value).splitlines()) == 1


@pytest.mark.parametrize("key,value,message", [
    ("rotary_emb_interleaved", True, "rotary_emb_interleaved=True is not supported"),
    ("position_embedding_type", "absolute", "position_embedding_type='absolute' is not supported"),
    ("rotary_emb_dim", 6, "rotary_emb_dim=6 rotates part of each head"),
    ("lora_adaptations", [], "lora_adaptations must be a non-empty list"),
    ("lora_rank", 0, "lora_rank must be a positive integer"),
])
def test_bad_original_configs(tmp_path, key, value, message):
    write_original(tmp_path, port_model(), **{key: value})
    with pytest.raises(ValueError, match=message):
        read_checkpoint(tmp_path, task="separation")


def test_lora_of_the_wrong_shape_is_named(tmp_path):
    write_original(tmp_path, port_model(), rank=4)
    config = json.loads((tmp_path / "config.json").read_text())
    config["lora_rank"] = 5
    (tmp_path / "config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match=r"the LoRA pair of roberta\.\S+ has shapes .* rank 5 \(lora_rank\)"):
        read_checkpoint(tmp_path, task="separation")


def test_task_on_a_checkpoint_whose_weights_hold_no_adapters(tmp_path):
    hf = port_model()
    write_original(tmp_path, hf)
    hf.save_pretrained(tmp_path / "plain")  # the original's names without parametrizations
    state = {"roberta." + k: v for k, v in load_file(str(tmp_path / "plain" / "model.safetensors")).items()}
    raw = json.loads((tmp_path / "config.json").read_text())
    with pytest.raises(ValueError, match=r"names task adapters .* but its weights hold none"):
        task_adapters.read_original(raw, state, "separation", tmp_path)
    assert set(task_adapters.read_original(raw, state, None, tmp_path)) == set(state)
