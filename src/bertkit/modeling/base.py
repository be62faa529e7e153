"""What every bertkit model shares: init, embedding access and tying, resizing, checkpointing, load/save.

Subclasses set ``hf_architecture`` (the HF class their checkpoints are saved as) and,
for task models, ``head_prefixes`` (the parameters that are new when a checkpoint
brings only a backbone).

Loading and saving are implemented in :mod:`bertkit.weights`, which imports modeling; the
methods here reach it through the slots of :mod:`bertkit.hooks` (filled by the package root),
so modeling never imports weights (design §2).
"""

from __future__ import annotations

import functools
import os
from typing import Any

import torch
from torch import nn

from bertkit import hooks
from bertkit.config import BERTConfig
from bertkit.modeling.fast import Linear
from bertkit.modeling.layers import BERTEmbeddings, BERTLMPredictionHead, sinusoidal_table
from bertkit.modeling.norm import RMSNorm


class hybridmethod:
    """A method that receives the class when called on the class, the instance when called on one."""

    def __init__(self, func):
        self.func = func
        functools.update_wrapper(self, func)

    def __get__(self, obj, cls):
        return functools.partial(self.func, cls if obj is None else obj)


class BERTPreTrainedModel(nn.Module):
    """Base of :class:`~bertkit.BERT` and every task model."""

    hf_architecture: str = "BertModel"
    #: Parameter-name prefixes of the task head; missing from a checkpoint they are freshly initialised.
    head_prefixes: tuple[str, ...] = ()

    def __init__(self, config: BERTConfig):
        super().__init__()
        if not isinstance(config, BERTConfig):
            raise TypeError(f"config must be a bertkit.BERTConfig, got {type(config).__name__}.")
        self.config = config
        self.load_report = None
        #: the ``"quantization"`` block of the int8 checkpoint this model was loaded from (None: not one);
        #: ``bertkit.inference.quantized.checkpoint_dtype`` reads it
        self.quantization = None

    # ------------------------------------------------------------------ init
    def post_init(self) -> None:
        """Initialise the weights as BERT does, then tie the output embeddings.

        A backbone child (a model itself) initialised itself on construction and is skipped.
        """
        for child in self.children():
            if not isinstance(child, BERTPreTrainedModel):
                child.apply(self.init_module_weights)
        self.tie_weights()

    @torch.no_grad()
    def init_module_weights(self, module: nn.Module) -> None:
        """Initialise one ``module`` in place as BERT does (``post_init`` applies it to every head layer).

        Linear and Embedding weights ~ normal(0, ``config.initializer_range``), their biases and an
        Embedding's padding row 0, LayerNorm weight 1 and bias 0, an LM head's separate bias 0, the position
        embeddings the sinusoidal table with ``config.sinusoidal_pos_embds`` (DistilBERT's; ``apply`` reaches the
        embeddings after their tables); other modules are left alone.
        """
        std = self.config.initializer_range
        if isinstance(module, nn.Linear):
            module.weight.normal_(0.0, std)
            if module.bias is not None:
                module.bias.zero_()
        elif isinstance(module, nn.Embedding):
            module.weight.normal_(0.0, std)
            if module.padding_idx is not None:
                module.weight[module.padding_idx].zero_()
        elif isinstance(module, (nn.LayerNorm, RMSNorm)):
            module.weight.fill_(1.0)
            if getattr(module, "bias", None) is not None:
                module.bias.zero_()
        elif isinstance(module, BERTLMPredictionHead) and module.bias is not None:
            module.bias.zero_()
        elif isinstance(module, BERTEmbeddings) and self.config.sinusoidal_pos_embds \
                and module.position_embeddings is not None:
            table = module.position_embeddings.weight
            table.copy_(sinusoidal_table(*table.shape))

    # ------------------------------------------------------------------ inference
    def optimize_for_inference(self, *, dtype=None, quantize: str | None = None, device=None):
        """Prepare this model for fast inference in place (eval mode, prepared kernels); returns it.

        ``dtype=torch.bfloat16`` for bf16, ``quantize="int8"`` for int8 dynamic quantization; see
        :func:`bertkit.inference.optimize_for_inference`. ``state_dict`` and ``save_pretrained`` are unchanged.
        """
        return hooks.optimize_for_inference(self, dtype=dtype, quantize=quantize, device=device)

    # ------------------------------------------------------------------ embeddings
    @property
    def base_model(self) -> nn.Module:
        """The :class:`~bertkit.BERT` backbone (the model itself for ``BERT``)."""
        return self.bert

    def get_input_embeddings(self) -> nn.Embedding:
        return self.base_model.embeddings.word_embeddings

    def set_input_embeddings(self, value: nn.Embedding) -> None:
        self.base_model.embeddings.word_embeddings = value
        self.tie_weights()

    def get_output_embeddings(self) -> nn.Linear | None:
        """The vocabulary projection of an LM head, or None for models without one."""
        cls = getattr(self, "cls", None)
        predictions = getattr(cls, "predictions", None)
        return predictions.decoder if predictions is not None else None

    def set_output_embeddings(self, value: nn.Linear) -> None:
        predictions = getattr(getattr(self, "cls", None), "predictions", None)
        if predictions is None:
            raise ValueError(f"{type(self).__name__} has no LM head; output embeddings exist on "
                             "BERTForPreTraining, BERTForMaskedLM and BERTForCausalLM.")
        predictions.decoder = value
        predictions.bias = value.bias
        self.tie_weights()

    def tie_weights(self) -> None:
        """Share the word embeddings with the LM decoder (when ``config.tie_word_embedding``)."""
        out = self.get_output_embeddings()
        if out is not None and self.config.tie_word_embedding:
            out.weight = self.get_input_embeddings().weight

    def resize_token_embeddings(self, new_num_tokens: int) -> nn.Embedding:
        """Resize the vocabulary to ``new_num_tokens`` (new rows initialised, old kept); keeps the tie."""
        if new_num_tokens <= 0:
            raise ValueError(f"new_num_tokens must be positive, got {new_num_tokens}.")
        old = self.get_input_embeddings()
        n = min(old.num_embeddings, new_num_tokens)
        new = nn.Embedding(new_num_tokens, old.embedding_dim, padding_idx=old.padding_idx
                           if old.padding_idx is not None and old.padding_idx < new_num_tokens else None,
                           device=old.weight.device, dtype=old.weight.dtype)
        self.init_module_weights(new)
        with torch.no_grad():
            new.weight[:n] = old.weight[:n]
        self.base_model.embeddings.word_embeddings = new
        out = self.get_output_embeddings()
        if out is not None:
            predictions = self.cls.predictions
            bias = None  # a head without bias (EuroBERT's lm_head without mlp_bias) keeps none
            if predictions.bias is not None:
                bias = nn.Parameter(torch.zeros(new_num_tokens, device=old.weight.device, dtype=out.bias.dtype))
                with torch.no_grad():
                    bias[:n] = predictions.bias[:n]
            decoder = Linear(old.embedding_dim, new_num_tokens, device=old.weight.device,
                                dtype=old.weight.dtype)
            self.init_module_weights(decoder)
            if not self.config.tie_word_embedding:
                with torch.no_grad():
                    decoder.weight[:n] = out.weight[:n]
            decoder.bias = bias
            predictions.decoder, predictions.bias = decoder, bias
        self.set_config(self.config.replace(vocab_size=new_num_tokens))
        self.tie_weights()
        return new

    def set_config(self, config: BERTConfig) -> None:
        """Make ``config`` the config of this model and of every model inside it (its backbone).

        :meth:`resize_token_embeddings` calls it; a subclass that keeps its config in another
        type (the pytorch_pretrained_bert compat) overrides it.
        """
        for module in self.modules():
            if isinstance(module, BERTPreTrainedModel):
                module.config = config

    def to(self, *args, **kwargs):
        """``nn.Module.to`` that also takes lucid's device name ``"gpu"`` (CUDA, or MPS on Apple)."""
        from bertkit.modeling.text import resolve_device

        args = tuple(resolve_device(a) if isinstance(a, str) and a.lower() == "gpu" else a for a in args)
        if isinstance(kwargs.get("device"), str):
            kwargs["device"] = resolve_device(kwargs["device"])
        return super().to(*args, **kwargs)

    # ------------------------------------------------------------------ checkpointing
    def gradient_checkpointing_enable(self) -> None:
        """Recompute each layer's activations in backward instead of storing them."""
        self.base_model.encoder.gradient_checkpointing = True

    def gradient_checkpointing_disable(self) -> None:
        self.base_model.encoder.gradient_checkpointing = False

    @property
    def is_gradient_checkpointing(self) -> bool:
        return self.base_model.encoder.gradient_checkpointing

    # ------------------------------------------------------------------ load / save
    @hybridmethod
    def from_pretrained(self_or_cls, source: str | os.PathLike | None = None, *, weights: Any = None,
                        **config_overrides: Any):
        """Load a checkpoint directory written by bertkit or HF transformers, or registered ``weights``.

        Exactly one of ``source`` / ``weights``: ``weights`` (``BERT_Weights.DEFAULT``, a
        ``WeightsEntry`` or a name like ``"bert-base-uncased"``; a ``source`` string that is no
        existing path but a registered name counts too) is downloaded and converted once by
        :func:`bertkit.weights.download.fetch`, then loaded from the cache.

        On the class it builds a new model from the checkpoint's config (with
        ``config_overrides`` applied, e.g. ``num_labels=3``); on an instance it loads the
        weights into that model and returns it. Reads ``model.safetensors`` (also sharded,
        via ``model.safetensors.index.json``) or ``pytorch_model.bin`` with
        ``torch.load(weights_only=True)``. Strict: a missing or unexpected key is a
        ``ValueError`` naming it, except the allowed adaptations (a task head absent from
        the checkpoint is freshly initialised, a known head the model lacks — MLM, NSP,
        classifier, QA — is dropped, the pooler may be absent, a classifier of another size
        is re-initialised, floating-point tensors are cast to the model's dtype), which are
        listed in ``model.load_report`` and each emitted as a :class:`bertkit.LoadWarning`.
        A head under unknown names (e.g. ``score.*``) is refused unless ``strict=False``,
        which drops it and initialises the model's own head. ``warn=False`` (or
        ``warnings.filterwarnings("ignore", category=bertkit.LoadWarning)``) silences the
        warnings. Returns the model in eval mode.
        """
        return hooks.load_pretrained(self_or_cls, source, weights, config_overrides)

    def save_pretrained(self, directory: str | os.PathLike, *, dtype: str | None = None) -> None:
        """Write ``config.json`` (HF's keys) and ``model.safetensors`` (HF's names) atomically.

        The directory loads in HF transformers' matching ``Bert*`` class (``Roberta*``, ``XLMRoberta*`` or
        ``Camembert*`` for a ``"roberta"`` family config, under those classes' names) and back in bertkit.
        ``dtype="int8"`` writes an int8 checkpoint instead (dense weights int8 + float32 scales, marked in
        config.json; bertkit loads it as the ``optimize_for_inference(quantize="int8")`` model of this one, bit
        for bit; HF transformers does not read it); ``"fp32"`` the float weights; None (default) the format
        the model was loaded from (float unless it came from an int8 checkpoint). See
        :mod:`bertkit.weights.int8`.
        """
        hooks.save_pretrained(self, directory, dtype=dtype)

    def num_parameters(self, trainable_only: bool = False) -> int:
        """Number of (unique) parameters; tied weights count once."""
        return sum(p.numel() for p in self.parameters() if p.requires_grad or not trainable_only)
