"""Jina embeddings v3 checkpoints in their original layout (``XLMRobertaLoRA``), written by the tests.

No library writes this layout offline, so :func:`write_original` makes one from an HF port model
(``JinaEmbeddingsV3Model``, whose weights are the base weights): the names HF's ``save_pretrained`` writes (the
original's flash-attention names: ``encoder.layers.{i}.mixer.Wqkv`` fused, ``norm1`` / ``norm2``, ``emb_ln``) under
``roberta.``, each Linear's and Embedding's weight as ``parametrizations.weight.original`` with random ``lora_A`` /
``lora_B`` stacks beside it, and the original's config.json keys (``model_type`` "xlm-roberta",
``lora_adaptations``, ``rotary_emb_base``...).
:func:`unmerged_hooks` adds a task's adapters to a port model's forward without touching its weights
(``x W^T + s (x A^T) B^T`` for a Linear, ``W[ids] + s A[ids] B`` for an Embedding): the reference the merged
weights are tested against.
"""

from __future__ import annotations

import json
import shutil

import torch
from safetensors.torch import load_file, save_file

TASKS = ["retrieval.query", "retrieval.passage", "separation", "classification", "text-matching"]
INSTRUCTIONS = {"retrieval.query": "Represent the query for retrieving evidence documents: ",
                "retrieval.passage": "Represent the document for retrieval: ", "separation": "",
                "classification": "", "text-matching": ""}
P = ".parametrizations.weight."
#: port module names (inside layers.{i}.) -> the original's
_LAYER = {"self_attn.o_proj": "mixer.out_proj", "post_attention_layernorm": "norm1",
          "post_mlp_layernorm": "norm2", "mlp.fc1": "mlp.fc1", "mlp.fc2": "mlp.fc2"}


def parametrize(plain: dict[str, torch.Tensor], tasks: int, rank: int, seed: int = 3,
                std: float = 0.3) -> dict[str, torch.Tensor]:
    """Every Linear / Embedding weight of ``plain`` as the original's parametrization, with random LoRA stacks."""
    g = torch.Generator().manual_seed(seed)
    out = {}
    for name, value in plain.items():
        module = name.removesuffix(".weight")
        is_linear = name.endswith(".weight") and value.dim() == 2 and "embeddings." not in name
        is_embedding = name.endswith(".weight") and "embeddings." in name and value.dim() == 2
        if not (is_linear or is_embedding):
            out[name] = value
            continue
        rows, cols = value.shape
        out[module + P + "original"] = value
        a, b = ((tasks, rank, cols), (tasks, rows, rank)) if is_linear else ((tasks, rows, rank), (tasks, rank, cols))
        out[module + P + "0.lora_A"] = torch.randn(a, generator=g) * std
        out[module + P + "0.lora_B"] = torch.randn(b, generator=g) * std
    return out


def original_config(port_config, rank: int = 4, alpha: float = 1.0, **extra) -> dict:
    """The original's config.json of an HF port config: its keys, the adapters' and flash-attention's."""
    return {
        "architectures": ["XLMRobertaModel"], "model_type": "xlm-roberta",
        "auto_map": {"AutoModel": "jinaai/xlm-roberta-flash-implementation--modeling_lora.XLMRobertaLoRA"},
        **{k: getattr(port_config, k) for k in (
            "vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size",
            "hidden_act", "hidden_dropout_prob", "attention_probs_dropout_prob", "max_position_embeddings",
            "type_vocab_size", "initializer_range", "layer_norm_eps", "pad_token_id", "bos_token_id",
            "eos_token_id")},
        "position_embedding_type": "rotary", "rotary_emb_base": port_config.rope_parameters["rope_theta"],
        "lora_adaptations": TASKS, "task_instructions": INSTRUCTIONS, "lora_rank": rank, "lora_alpha": alpha,
        "lora_dropout_p": 0.0, "lora_main_params_trainable": False, "load_trained_adapters": True,
        "use_flash_attn": True, "emb_pooler": None, "matryoshka_dimensions": [8, 16, 36], "truncate_dim": None,
        **extra,
    }


def write_original(directory, port_model, rank: int = 4, alpha: float = 1.0, **config_extra) -> dict:
    """Write ``port_model`` (a bare ``JinaEmbeddingsV3Model``) as an original-layout directory with random
    adapters; returns the tensors written."""
    directory.mkdir(parents=True, exist_ok=True)
    port_model.save_pretrained(directory / "hf-port")  # HF writes the original's names (flash-attention's)
    written = load_file(str(directory / "hf-port" / "model.safetensors"))
    shutil.rmtree(directory / "hf-port")
    state = parametrize({"roberta." + k: v for k, v in written.items()}, len(TASKS), rank)
    save_file({k: v.contiguous() for k, v in state.items()}, str(directory / "model.safetensors"))
    config = original_config(port_model.config, rank, alpha, **config_extra)
    (directory / "config.json").write_text(json.dumps(config, indent=2))
    return state


def unmerged_hooks(port_model, state: dict[str, torch.Tensor], task: str, scaling: float) -> list:
    """Forward hooks adding task ``task``'s adapters (the original's tensors ``state``) to ``port_model``'s
    Linear and Embedding outputs, the weights untouched; returns the handles."""
    t = TASKS.index(task)
    handles = []
    for name, module in port_model.named_modules():
        if isinstance(module, torch.nn.Linear):
            handles.append(module.register_forward_hook(_linear_hook(name, state, t, scaling)))
        elif isinstance(module, torch.nn.Embedding):
            a, b = state[f"roberta.{name}{P}0.lora_A"][t], state[f"roberta.{name}{P}0.lora_B"][t]
            handles.append(module.register_forward_hook(
                lambda _m, args, out, a=a, b=b: out + scaling * (a[args[0]] @ b)))
    return handles


def _linear_hook(name: str, state, t: int, scaling: float):
    _, i, rest = name.split(".", 2) if name.startswith("layers.") else (None, None, name)
    if i is not None and rest in ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"):
        key, part = f"roberta.encoder.layers.{i}.mixer.Wqkv", "qkv".index(rest[-6])
    elif i is not None:
        key, part = f"roberta.encoder.layers.{i}.{_LAYER[rest]}", None
    else:
        key, part = f"roberta.{name}", None
    a, b = state[key + P + "0.lora_A"][t], state[key + P + "0.lora_B"][t]
    if part is not None:
        b = b.chunk(3)[part]
    return lambda _m, args, out: out + scaling * ((args[0] @ a.T) @ b.T)
