"""Inference speed of bertkit's BERT vs HF transformers' BertModel, side by side in one run.

Both models hold the same random weights (HF's, loaded into bertkit through an HF
directory). Variants are interleaved round by round so machine drift hits both alike;
the table reports medians and bertkit's speed as a ratio of HF's (>1 = bertkit faster).

    python benchmarks/forward.py [--size base] [--rounds 5]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time

import torch
import transformers

import bertkit
from bertkit.presets import preset_fields

transformers.logging.set_verbosity_error()
transformers.utils.logging.disable_progress_bar()

#: name -> (batch, length, fraction of real tokens per row)
WORKLOADS = {"batch 8 x 128": (8, 128, 1.0), "latency 1 x 128": (1, 128, 1.0),
             "padded 8 x 128 (70% real)": (8, 128, 0.7)}


def make_inputs(batch: int, length: int, real: float, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(1000, 30000, (batch, length), generator=g)
    mask = torch.ones_like(ids)
    if real < 1.0:  # lengths spread so that `real` of the tokens are not padding
        lengths = torch.linspace(2 * real - 1, 1.0, batch).mul(length).long().clamp(min=1)
        mask = (torch.arange(length)[None] < lengths[:, None]).long()
    return ids, mask


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--size", default="base")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    hf = transformers.BertModel(transformers.BertConfig(**preset_fields(args.size), attn_implementation="sdpa"))
    with tempfile.TemporaryDirectory() as d:
        hf.save_pretrained(d)
        ours = bertkit.BERT.from_pretrained(d)
    hf.eval()
    models = {"HF BertModel (sdpa)": lambda ids, m: hf(input_ids=ids, attention_mask=m).last_hidden_state,
              "bertkit BERT (sdpa)": lambda ids, m: ours(ids, m)[0]}

    print(f"size={args.size} threads={torch.get_num_threads()} torch={torch.__version__} "
          f"transformers={transformers.__version__}")
    print(f"{'workload':<28}{'HF tok/s':>12}{'bertkit tok/s':>15}{'ratio':>8}")
    for workload, (batch, length, real) in WORKLOADS.items():
        ids, mask = make_inputs(batch, length, real)
        tokens = int(mask.sum())
        times: dict[str, list[float]] = {name: [] for name in models}
        with torch.inference_mode():
            for run in models.values():  # warm-up
                run(ids, mask)
            for _ in range(args.rounds):
                for name, run in models.items():
                    start = time.perf_counter()
                    run(ids, mask)
                    times[name].append(time.perf_counter() - start)
        hf_s, ours_s = (statistics.median(times[name]) for name in models)
        print(f"{workload:<28}{tokens / hf_s:>12.0f}{tokens / ours_s:>15.0f}{hf_s / ours_s:>8.2f}")


if __name__ == "__main__":
    main()
