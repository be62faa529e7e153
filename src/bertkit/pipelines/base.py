"""The pipeline contract: inputs in, plain Python answers out, in length-sorted batches.

A task subclasses :class:`Pipeline` with three steps:

* ``preprocess(item, params) -> list[feature]``: one input (a text, a pair, a question with its context)
  becomes one or more features, dicts with ``input_ids`` / ``token_type_ids`` / ``attention_mask`` lists
  plus whatever ``postprocess`` needs (offsets, window positions);
* ``outputs(batch) -> tensor or tuple of tensors``: the model on a padded batch (``[B, ...]`` each);
* ``postprocess(item, features, outputs, params)``: the answer for one input from its features and their
  outputs (numpy float32, token axes trimmed to each feature's length).

:meth:`Pipeline.__call__` takes one input (answer returned bare), a list or tuple (a list back, same order),
or any other iterable (a generator back, read in chunks: memory stays bounded whatever the stream's size).
Features of a call run in batches sorted by length (:mod:`bertkit.inference.batching`).
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Iterable, Iterator
from typing import Any, ClassVar

import torch

from bertkit.inference.batching import CHUNK_BATCHES, check_batch_size, chunks, pad, run_sorted
from bertkit.inference.finite import CAUSES, NonFiniteOutput, is_finite
from bertkit.inference.precision import prepare
from bertkit.tokenization.cut import cut_pairs, cut_texts

#: call parameters every task takes, with their defaults: which end of a text truncation keeps
#: (``"right"`` cuts the end, ``"left"`` the start)
COMMON: dict[str, Any] = {"truncation_side": "right"}


class Pipeline:
    """A model and its tokenizer answering one task. Build one with :func:`bertkit.pipeline`."""

    #: when set (a name for the model), a non-finite model output raises :class:`NonFiniteOutput` naming it
    check_finite: str | None = None

    #: the task name(s) :func:`bertkit.pipeline` knows this class by
    task: str = ""
    #: the model class a source is loaded into
    model_class: type | None = None
    #: keyword arguments ``__call__`` accepts, with their defaults
    defaults: ClassVar[dict[str, Any]] = {}
    #: what one input is, for error messages
    input_description = "a text"
    #: whether :meth:`outputs` are per token (``[B, L, ...]``, trimmed to each row's length) or per row
    token_level: bool = False

    def __init__(self, model: torch.nn.Module, tokenizer: Any, *, device: str | torch.device | None = None,
                 dtype: Any = "auto", batch_size: int = 32, batch_tokens: int | None = None,
                 max_length: int | None = None, **defaults: Any):
        """``dtype``: ``"auto"`` (bf16 where the hardware computes it and this task's measured quality allows,
        else fp32; :func:`bertkit.inference.precision.resolve`), ``"fp32"``, ``"bf16"``, ``"fp16"``, ``"int8"``,
        a torch dtype, or None (the model's own). What it became, and why, is :attr:`dtype_choice`."""
        self.batch_size = check_batch_size(batch_size)
        if batch_tokens is not None:
            check_batch_size(batch_tokens)
        self.batch_tokens = batch_tokens
        self.model, self.tokenizer = model, tokenizer
        self.dtype_choice, self.max_length = self.place(device, dtype, max_length)
        self.device = next(self.model.parameters()).device
        self.pad_values = {"input_ids": tokenizer.pad_token_id, "token_type_ids": 0, "attention_mask": 0}
        self.params = self.check({**COMMON, **type(self).defaults, **defaults})

    @classmethod
    def from_source(cls, source: str | os.PathLike, *, load: dict[str, Any] | None = None, **options: Any) -> Pipeline:
        """Load ``source`` (anything bertkit loads) into :attr:`model_class` with its own tokenizer. A head the
        checkpoint lacks is initialised at random and said in a :class:`bertkit.LoadWarning` (its answers mean
        nothing until trained); heads the task does not use (NSP for fill-mask) are dropped quietly. ``load``:
        options of the loading (:func:`bertkit.tasks.sources.load_source`'s, e.g. Jina v3's ``task``)."""
        from bertkit.modeling.backbone import BERT
        from bertkit.tasks.sources import load_model_and_tokenizer
        from bertkit.weights import LoadWarning

        model, tokenizer = load_model_and_tokenizer(source, cls.model_class, warn=False, **(load or {}))
        report = getattr(model, "load_report", None)
        new = sorted(k for k in (report.initialized + report.resized if report is not None else [])
                     if not (cls.model_class is BERT and k.startswith("pooler.")))  # token outputs: no pooler
        if new:
            warnings.warn(LoadWarning(f"{source} has no trained {cls.task} head: {', '.join(new[:4])}"
                                      f"{' ...' if len(new) > 4 else ''} initialised at random; its answers mean "
                                      "nothing until the model is fine-tuned."), stacklevel=3)
        return cls(model, tokenizer, **options)

    def place(self, device: str | torch.device | None, dtype: Any, max_length: int | None) -> tuple[Any, int]:
        """Put :attr:`model` in eval mode on ``device`` (None: where it is), in ``dtype`` on the fast path; returns
        ``(dtype choice, max_length)``, the length capped by the model's positions. A task whose model is a
        sentence-transformers kind that places itself (rerank: a :class:`~bertkit.sentence.CrossEncoder`) overrides
        this."""
        from bertkit.modeling.text import resolve_device

        self.model.eval()
        if device is not None:
            self.model.to(resolve_device(device))
        choice = prepare(self.model, dtype, self.task)
        limit = getattr(getattr(self.model, "config", None), "max_tokens", 512)
        return choice, min(max_length or limit, limit)

    # ------------------------------------------------------------------------------ what a task defines
    def check(self, params: dict[str, Any]) -> dict[str, Any]:
        """Validate call parameters (ValueError naming the bad one); returns them."""
        known = set(type(self).defaults) | set(COMMON)
        unknown = sorted(set(params) - known)
        if unknown:
            raise ValueError(f"{self.task} does not take {unknown}; it takes {sorted(known)}.")
        if params.get("truncation_side", "right") not in ("right", "left"):
            raise ValueError(f"truncation_side must be 'right' or 'left', got {params['truncation_side']!r}.")
        return params

    def is_single(self, inputs: Any) -> bool:
        return isinstance(inputs, str)

    def preprocess(self, item: Any, params: dict[str, Any]) -> list[dict[str, Any]]:
        raise NotImplementedError

    def outputs(self, batch: dict[str, torch.Tensor]) -> torch.Tensor | tuple[torch.Tensor, ...]:
        raise NotImplementedError

    def postprocess(self, item: Any, features: list[dict[str, Any]], outputs: list[Any],
                    params: dict[str, Any]) -> Any:
        raise NotImplementedError

    # ------------------------------------------------------------------------------------------- running
    def __call__(self, inputs: Any, **params: Any) -> Any:
        params = self.check({**self.params, **params})
        if self.is_single(inputs):
            return self.run([inputs], params)[0]
        if isinstance(inputs, str | bytes):
            raise ValueError(f"{self.task} takes {self.input_description} (or a list or iterable of them), "
                             f"not a bare string.")
        if isinstance(inputs, list | tuple):
            return self.run(list(inputs), params)
        return self.stream(inputs, **params)

    def stream(self, inputs: Iterable[Any], **params: Any) -> Iterator[Any]:
        """Answers for any iterable, in order, computed ``batch_size x 32`` inputs at a time."""
        params = self.check({**self.params, **params})
        for chunk in chunks(inputs, self.batch_size * CHUNK_BATCHES):
            yield from self.run(chunk, params)

    def run(self, items: list[Any], params: dict[str, Any]) -> list[Any]:
        """Answers for ``items``: every feature in length-sorted batches, then each item's postprocess."""
        features, owners = [], []
        for index, item in enumerate(items):
            produced = self.preprocess(item, params)
            features += produced
            owners += [index] * len(produced)
        results = run_sorted(features, [len(f["input_ids"]) for f in features], self.batch_size, self.forward,
                             max_tokens=self.batch_tokens)
        grouped: list[tuple[list, list]] = [([], []) for _ in items]
        for owner, feature, result in zip(owners, features, results):
            grouped[owner][0].append(feature)
            grouped[owner][1].append(result)
        return [self.postprocess(item, f, r, params) for item, (f, r) in zip(items, grouped)]

    @torch.inference_mode()
    def forward(self, rows: list[dict[str, Any]]) -> list[Any]:
        """The model's outputs for ``rows`` as float32 numpy, one entry per row; token axes trimmed."""
        batch = pad(rows, self.pad_values, self.device)
        out = self.outputs(batch)
        arrays = [t.float().cpu().numpy() for t in (out if isinstance(out, tuple) else (out,))]  # one copy each
        per_row = []
        for i, row in enumerate(rows):
            cut = tuple(a[i, :len(row["input_ids"])] if self.token_level else a[i] for a in arrays)
            self.finite(*cut)
            per_row.append(cut if isinstance(out, tuple) else cut[0])
        return per_row

    def finite(self, *arrays: Any) -> None:
        """Raise :class:`NonFiniteOutput` if :attr:`check_finite` is set and an array holds NaN or infinity."""
        if self.check_finite and not is_finite(arrays):
            raise NonFiniteOutput(f"the model {self.check_finite} produced non-finite outputs (NaN or infinity): "
                                  f"{CAUSES}.")

    def encode(self, text: str, pair: str | None = None, params: dict[str, Any] | None = None, prefix: str = "",
               **options: Any) -> dict[str, list]:
        """One unpadded feature: the tokenizer's lists for ``prefix + text`` (and ``pair``), truncated to the model
        at the side ``params["truncation_side"]`` names. The texts are cut first to the part truncation keeps
        (:func:`~bertkit.tokenization.cut.cut_texts`: the same tokens, at a cost bounded by the model's limit);
        offsets still index the texts given."""
        options.setdefault("truncation", True)
        options.setdefault("max_length", self.max_length)
        side = options.setdefault("truncation_side", (params or self.params).get("truncation_side", "right"))
        options.setdefault("return_token_type_ids", True)  # every family's batch has them (ignored where unused)
        texts = [text] if pair is None else [text, pair]
        cut = texts
        if options["truncation"] and not options.get("return_overflowing_tokens"):
            if pair is None:
                cut = cut_texts(self.tokenizer, texts, options["max_length"], side, prefix=prefix)
            else:
                (first,), (second,) = cut_pairs(self.tokenizer, [text], [pair], options["max_length"], side,
                                                options["truncation"], prefix=prefix)
                cut = [first, second]
        encoding = self.tokenizer(prefix + cut[0], None if pair is None else cut[1], **options)
        feature = dict(encoding)
        skipped = [len(t) - len(c) for t, c in zip(texts, cut)]  # characters a left cut took off each text's start
        if "offset_mapping" in feature and any(skipped):
            feature["offset_mapping"] = _shifted(feature["offset_mapping"], encoding.sequence_ids(0), skipped)
        return feature


def _shifted(offsets: list[tuple[int, int]], sequence_ids: list[int | None], skipped: list[int]) -> list:
    """``offsets`` of the tokens of text ``i`` moved ``skipped[i]`` characters on (special tokens' stay)."""
    return [(start, end) if i is None else (start + skipped[i], end + skipped[i])
            for (start, end), i in zip(offsets, sequence_ids)]
