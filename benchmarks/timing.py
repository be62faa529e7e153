"""The benchmarks' timing: variants interleaved round by round, GEMM peaks, BERT's FLOPs, and ``measure``, which
times encoder variants on random batches against the first one (``run.py``, ``precision_speed.py``, ``cuda_check.py``).

Times are medians (or another statistic) of rounds in which every variant runs once in turn, so drift of a shared
machine hits them alike; on a GPU a ``sync`` before and after each variant's calls makes the clock see the device's
work, not the launches.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F

import bertkit
from bertkit.modeling import fast
from bertkit.modeling.fast import Linear


# ---------------------------------------------------------------------------- timing
def interleaved(variants: dict[str, Callable[[], object]], rounds: int, warmup: int = 1,
                statistic: Callable[[list[float]], float] = statistics.median, *, calls: int = 1,
                sync: Callable[[], object] | None = None) -> dict[str, float]:
    """Median (or ``statistic``) seconds per call of each variant, all run in turn once per round (after ``warmup``
    rounds): ``calls`` back-to-back calls a round, timed together. ``sync`` (e.g. ``torch.cuda.synchronize``) runs
    before the clock starts and before it stops, so that it counts work queued on a device."""
    times: dict[str, list[float]] = {name: [] for name in variants}
    for r in range(warmup + rounds):
        for name, run in variants.items():
            if sync is not None:
                sync()
            start = time.perf_counter()
            for _ in range(calls):
                run()
            if sync is not None:
                sync()
            if r >= warmup:
                times[name].append((time.perf_counter() - start) / calls)
    return {name: statistic(t) for name, t in times.items()}


def gemm_peaks(rounds: int) -> dict[str, float]:
    """Best GFLOP/s of one [1024, 768] x [768, 3072] product on each backend over the rounds, measured now
    (the "peak" the model rows are a percentage of)."""
    m, k, n = 1024, 768, 3072
    x, w = torch.randn(m, k), torch.randn(n, k)
    xb, wb = x.bfloat16(), w.bfloat16()
    layer = bertkit.optimize_for_inference(Linear(k, n, bias=False), quantize="int8")
    layer.weight.data.copy_(w)
    runs = {"fp32 F.linear (default BLAS)": lambda: F.linear(x, w)}
    if fast.onednn_available():
        wm = w.to_mkldnn()
        runs["fp32 oneDNN"] = lambda: fast.onednn_linear(x, wm, None)
    runs["bf16 F.linear"] = lambda: F.linear(xb, wb)
    runs["int8 dynamic (fbgemm)"] = lambda: layer(x)
    with torch.inference_mode():
        seconds = interleaved(runs, max(2 * rounds, 10), statistic=min)
    return {name: 2 * m * k * n / s / 1e9 for name, s in seconds.items()}


def peak_for(variant: str, peaks: dict[str, float]) -> float:
    """The GEMM peak a variant's row is a percentage of: int8, bf16 or the best fp32 one."""
    if "int8" in variant:
        return peaks["int8 dynamic (fbgemm)"]
    if "bf16" in variant:
        return peaks["bf16 F.linear"]
    return max(peaks["fp32 F.linear (default BLAS)"], peaks.get("fp32 oneDNN", 0.0))


def forward_flops(cfg: dict, tokens: int, lengths: list[int]) -> float:
    """Forward FLOPs of a BERT encoder on ``tokens`` real tokens (dense layers) with rows of ``lengths`` (attention)."""
    h, inner, layers = cfg["hidden_size"], cfg["intermediate_size"], cfg["num_hidden_layers"]
    dense = 2 * tokens * (4 * h * h + 2 * h * inner)
    attention = sum(4 * n * n * h for n in lengths)
    return layers * (dense + attention)


# ---------------------------------------------------------------------------- encoder variants on random batches
#: BERT's inputs, in the order of its forward (and of the ONNX graphs exported from HF's model)
BERT_INPUTS = ("input_ids", "attention_mask", "token_type_ids")


def spread_mask(batch: int, length: int, real: float, minimum: int = 1) -> torch.Tensor:
    """A ``[batch, length]`` padding mask whose rows hold ``real`` of the tokens on average: lengths spread evenly
    from ``2 * real - 1`` to all of ``length`` (one row: ``real`` of it), each at least ``minimum``."""
    if real >= 1.0:
        return torch.ones(batch, length, dtype=torch.long)
    share = torch.linspace(2 * real - 1, 1.0, batch) if batch > 1 else torch.tensor([real])
    lengths = share.mul(length).round().long().clamp(min=minimum, max=length)
    return (torch.arange(length)[None] < lengths[:, None]).long()


def make_batch(batch: int, length: int, real: float, vocab: int, seed: int = 0, pad_id: int | None = None):
    """Random ids, a padding mask with ``real`` of the tokens real (:func:`spread_mask`), zero token types.
    ``pad_id``: the id at padded positions (None: random ids there too)."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(1000, vocab, (batch, length), generator=g)
    mask = spread_mask(batch, length, real)
    if pad_id is not None:
        ids = ids.masked_fill(mask == 0, pad_id)
    return ids, mask, torch.zeros_like(ids)


def model_inputs(batch: int, length: int, real: float, vocab: int, names=BERT_INPUTS,
                 pad_id: int | None = None) -> dict[str, torch.Tensor]:
    """:func:`make_batch` as keyword inputs, those of ``names`` only (a family without token types has none)."""
    return {name: tensor for name, tensor in zip(BERT_INPUTS, make_batch(batch, length, real, vocab, pad_id=pad_id))
            if name in names}


Runner = Callable[[dict[str, torch.Tensor]], torch.Tensor]  # keyword inputs -> last hidden state


@dataclass(frozen=True)
class Workload:
    """``batch`` rows of ``length`` tokens, ``real`` of them real; ``extra``: also time the optional variants."""

    name: str
    batch: int
    length: int
    real: float
    extra: bool = True


def measure(workloads: list[Workload], runs: dict[str, Runner], rounds: int, *, vocab: int, names=BERT_INPUTS,
            pad_id: int | None = None, extra: dict[str, Runner] | None = None, cfg: dict | None = None,
            peaks: dict[str, float] | None = None, ort_name: str = "ONNX Runtime fp32") -> list[dict]:
    """Time ``runs`` (and ``extra`` on workloads that want it) on each workload, interleaved round by round:
    one row per variant with its real tokens/s, its speed over the first of ``runs`` (HF fp32) and over
    ``ort_name`` (when timed), its largest difference to the first's last hidden state at real tokens, and
    with ``cfg`` and ``peaks`` its "% GEMM peak" (BERT's FLOPs)."""
    reference = next(iter(runs))
    rows = []
    for w in workloads:
        inputs = model_inputs(w.batch, w.length, w.real, vocab, names, pad_id)
        variants = {**runs, **((extra or {}) if w.extra else {})}
        with torch.inference_mode():
            outputs = {v: run(inputs).float() for v, run in variants.items()}
            seconds = interleaved({v: (lambda run=run, inputs=inputs: run(inputs)) for v, run in variants.items()},
                                  rounds)
        mask = inputs["attention_mask"]
        lengths = mask.sum(1).tolist()
        tokens = sum(lengths)
        real_mask = mask.bool()
        for v, s in seconds.items():
            row = {"workload": w.name, "variant": v, "ms": 1e3 * s, "real tokens/s": tokens / s,
                   "x HF fp32": seconds[reference] / s,
                   "x ORT fp32": seconds[ort_name] / s if ort_name in seconds else None,
                   "max diff": (outputs[v] - outputs[reference])[real_mask].abs().max().item()}
            if cfg is not None and peaks is not None:
                # what the variant computes: bertkit skips the padding, the others compute it
                work = forward_flops(cfg, tokens, lengths) if v.startswith("bertkit") else \
                    forward_flops(cfg, w.batch * w.length, [w.length] * w.batch)
                row["% GEMM peak"] = 100 * work / s / 1e9 / peak_for(v, peaks)
            rows.append(row)
    return rows
