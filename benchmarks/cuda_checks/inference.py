"""Section ``inference``: BERT-base forward latency and throughput, bertkit (sdpa, eager, fast path off) vs HF (sdpa,
eager) in each precision, the variants interleaved round by round (``benchmarks/timing.py``)."""

from __future__ import annotations

from functools import partial
from pathlib import Path

import torch
from timing import interleaved

from cuda_checks.common import (
    BASE,
    DTYPES,
    QUICK_BASE,
    hf_and_bertkit,
    padded_inputs,
    run_hf,
    run_ours,
    sync,
    table,
)


def plain_path(model, ids, mask, types):
    """bertkit with its fast path off: the padded batch throughout (no unpadding), as the CPU's plain path."""
    from bertkit.modeling import fast

    with fast.fast_path(False):
        return run_ours(model, ids, mask, types)


def inference(args, device: torch.device, workdir: Path) -> None:
    cfg = BASE if not args.quick else QUICK_BASE
    load = hf_and_bertkit(cfg, workdir, std=None)
    workloads = [("32 x 128", 32, 128, 1.0), ("32 x 128, 30 % padding", 32, 128, 0.7), ("1 x 128", 1, 128, 1.0)]
    if args.quick:
        workloads = [(n, min(b, 4), 32, r) for n, b, _, r in workloads]
    rows = []
    print(f"TF32 matmul allowed: {torch.backends.cuda.matmul.allow_tf32 if device.type == 'cuda' else '-'} "
          "(torch's default, which neither library changes)")
    for dtype_name in args.dtypes:
        dtype = DTYPES[dtype_name]
        models = {"HF sdpa": load("hf", "sdpa", dtype, device), "HF eager": load("hf", "eager", dtype, device),
                  "bertkit sdpa": load("ours", "sdpa", dtype, device),
                  "bertkit eager": load("ours", "eager", dtype, device)}
        for name, b, length, real in workloads:
            ids, mask, tt = (t.to(device) for t in padded_inputs(b, length, 30522, 2, real, seed=4))
            variants = {v: partial(run_hf if v.startswith("HF") else run_ours, m, ids, mask, tt)
                        for v, m in models.items()}
            variants["bertkit sdpa, fast path off"] = partial(plain_path, models["bertkit sdpa"], ids, mask, tt)
            with torch.inference_mode():
                seconds = interleaved(variants, args.rounds, calls=args.iters if b > 1 else 4 * args.iters,
                                      sync=partial(sync, device))
            tokens = int(mask.sum())
            for v, s in seconds.items():
                rows.append({"dtype": dtype_name, "workload": name, "variant": v, "ms": 1e3 * s,
                             "sequences/s": b / s, "real tokens/s": tokens / s,
                             "x HF sdpa": seconds["HF sdpa"] / s})
        del models
        if device.type == "cuda":
            torch.cuda.empty_cache()
    base = "BERT-base" if not args.quick else "small"
    table(f"Inference, {base} encoder forward (inference_mode), median of {args.rounds} rounds", rows)
