"""The one inference loop: run a model over a dataset, in order, and hand back what it computed.

Task modules turn the outputs into answers and metrics (labels, spans, entities); they never
write a second loop. :func:`predict_batches` is what evaluation, ``predict`` and the
pretraining report share with the :class:`~bertkit.training.Trainer`'s evaluation: eval mode,
no gradients, the run's precision, batches moved to the model's device.
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import torch
from torch import nn
from torch.utils.data import DataLoader

from bertkit.training.config import resolve_precision


def autocast(device: torch.device, precision: str):
    """The autocast context of ``precision`` (``"fp32"``: none; ``"bf16"`` / ``"fp16"``) on ``device``."""
    if precision == "fp32":
        return contextlib.nullcontext()
    if precision not in ("bf16", "fp16"):
        raise ValueError(f"precision must be a resolved one (fp32, bf16, fp16), got {precision!r}; "
                         "resolve 'auto' with bertkit.training.config.resolve_precision.")
    dtype = torch.bfloat16 if precision == "bf16" else torch.float16
    return torch.autocast(device.type, dtype=dtype)


def to_device(batch: Any, device: torch.device) -> Any:
    """Tensors in ``batch`` (nested dicts, lists, tuples) moved to ``device``; everything else as it is."""
    if isinstance(batch, torch.Tensor):
        return batch.to(device, non_blocking=device.type == "cuda")
    if isinstance(batch, Mapping):
        return {k: to_device(v, device) for k, v in batch.items()}
    if isinstance(batch, list | tuple):
        return type(batch)(to_device(v, device) for v in batch)
    return batch


def forward_inputs(model: nn.Module, batch: Mapping[str, Any]) -> Any:
    """``model(**inputs)`` with the batch entries whose names ``model.forward`` takes (labels are left out)."""
    names = inspect.signature(model.forward).parameters
    return model(**{k: v for k, v in batch.items() if k in names})


@torch.no_grad()
def predict_batches(model: nn.Module, dataset, *, collate_fn: Callable | None = None, batch_size: int = 32,
                    precision: str = "fp32", forward: Callable[[nn.Module, Mapping[str, Any]], Any] = forward_inputs,
                    ) -> Iterator[tuple[Mapping[str, Any], Any]]:
    """Yield ``(batch, outputs)`` for consecutive batches of ``dataset`` in its order.

    ``batch`` is what ``collate_fn`` made (on the CPU, as collated); ``outputs`` is
    ``forward(model, batch_on_device)`` with every tensor detached, moved to the CPU and, if
    floating point, cast to float32. The model runs in eval mode on its own device and is put
    back into the mode it was in. ``precision`` may be ``"auto"`` (bf16 where the device has it natively).
    """
    device = next((p.device for p in model.parameters()), torch.device("cpu"))
    precision = resolve_precision(precision, device)
    loader = DataLoader(dataset, batch_size=batch_size, shuffle=False, collate_fn=collate_fn)
    was_training = model.training
    model.eval()
    try:
        for batch in loader:
            with autocast(device, precision):
                outputs = forward(model, to_device(batch, device))
            yield batch, _to_cpu_float(outputs)
    finally:
        model.train(was_training)


def _to_cpu_float(outputs: Any) -> Any:
    if isinstance(outputs, torch.Tensor):
        outputs = outputs.detach().cpu()
        return outputs.float() if outputs.is_floating_point() else outputs
    if isinstance(outputs, Mapping):
        return {k: _to_cpu_float(v) for k, v in outputs.items()}
    if isinstance(outputs, list | tuple):
        return type(outputs)(_to_cpu_float(v) for v in outputs)
    return outputs
