"""``bertkit demo``: the model family at a glance and a forward pass through each task model.

(The pretraining demo on the bundled corpus replaces this once pretraining lands.)
"""

from __future__ import annotations

import argparse
import time


def run(size: str = "tiny", batch: int = 4, length: int = 32, seed: int = 0) -> None:
    import torch

    from bertkit import SIZES, build
    from bertkit.modeling import TASKS

    print("bertkit model family: sizes (backbone parameters, counted without allocating)")
    for name in SIZES:
        with torch.device("meta"):
            n = build("backbone", name).num_parameters()
        layers, hidden, heads = SIZES[name]
        print(f"  {name:<7} L={layers:<2} H={hidden:<4} A={heads:<2} {n / 1e6:7.1f}M")

    torch.manual_seed(seed)
    print(f"\nforward pass of every task model ({size}, random weights, batch {batch} x {length} tokens):")
    input_ids = torch.randint(1000, 30000, (batch, length))
    attention_mask = torch.ones_like(input_ids)
    attention_mask[1:, length // 2:] = 0  # pad some rows
    for task in TASKS:
        model = build(task, size).eval()
        ids = input_ids[:, None].expand(-1, 3, -1) if task == "multiple_choice" else input_ids
        mask = attention_mask[:, None].expand(-1, 3, -1) if task == "multiple_choice" else attention_mask
        with torch.inference_mode():
            model(ids, mask)  # warm-up: the first call pays one-off allocation costs
            start = time.perf_counter()
            out = model(ids, mask)
        ms = (time.perf_counter() - start) * 1e3
        shapes = ", ".join(str(tuple(o.shape)) for o in (out if isinstance(out, tuple) else (out,)))
        print(f"  {type(model).__name__:<30} -> {shapes:<28} {ms:6.1f} ms")


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="bertkit demo", description=__doc__)
    parser.add_argument("--size", default="tiny")
    args = parser.parse_args(argv)
    run(args.size)
    return 0
