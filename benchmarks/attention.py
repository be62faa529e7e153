"""Unpadded attention, four ways: which one the engine should use (it uses the first).

The engine runs every dense layer on the packed real tokens ``[N, H]``; attention needs the sequences apart.
For BERT-base heads (12 x 64) and a batch of 8 x 128 with 30 % padding, this times, interleaved, medians:

1. scatter to ``[B, L]`` and one masked SDPA call (what ``bertkit.modeling.unpad`` does);
2. nested jagged tensors (``torch.nested``, ``layout=torch.jagged``) through SDPA;
3. per-length buckets: one unmasked SDPA call per distinct length;
4. one block-diagonal mask over all N tokens (``[N, N]``).

forward only (inference) and forward + backward (training), with each variant's max diff to the first.

    python benchmarks/attention.py [--rounds 9] [--threads 2]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
import torch.nn.functional as F

HEADS, HEAD_DIM = 12, 64


def batch(b: int, length: int, real: float, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Packed q/k/v ``[3, N, nh, hd]`` and the real lengths ``[B]`` (mean ``real * length``)."""
    g = torch.Generator().manual_seed(seed)
    lengths = (torch.rand(b, generator=g) * 2 * (1 - real) * length).round().long().clamp(max=length - 1)
    lengths = length - lengths
    qkv = torch.randn(3, int(lengths.sum()), HEADS, HEAD_DIM, generator=g)
    return qkv, lengths


def padded(qkv: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    b, length = len(lengths), int(lengths.max())
    mask = torch.arange(length)[None] < lengths[:, None]  # [B, L]
    dense = qkv.new_zeros(3, b, length, HEADS, HEAD_DIM)
    dense[:, mask] = qkv
    q, k, v = dense.transpose(2, 3)  # [B, nh, L, hd]
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask[:, None, None, :])
    return out.transpose(1, 2)[mask]  # [N, nh, hd]


def nested(qkv: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    offsets = torch.cat([lengths.new_zeros(1), lengths.cumsum(0)])
    q, k, v = (torch.nested.nested_tensor_from_jagged(t, offsets).transpose(1, 2) for t in qkv)
    out = F.scaled_dot_product_attention(q, k, v)
    return out.transpose(1, 2).values()


def buckets(qkv: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    starts = torch.cat([lengths.new_zeros(1), lengths.cumsum(0)])[:-1]
    out = torch.empty_like(qkv[0])
    for n in lengths.unique().tolist():
        rows = (lengths == n).nonzero().flatten()
        index = (starts[rows, None] + torch.arange(n)).flatten()  # [G * n]
        q, k, v = qkv[:, index].view(3, len(rows), n, HEADS, HEAD_DIM).transpose(2, 3)
        out[index] = F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(-1, HEADS, HEAD_DIM)
    return out


def block_diagonal(qkv: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    sequence = torch.repeat_interleave(torch.arange(len(lengths)), lengths)
    allowed = sequence[:, None] == sequence[None, :]  # [N, N]
    q, k, v = qkv.transpose(1, 2)[:, None]  # [1, nh, N, hd]
    return F.scaled_dot_product_attention(q, k, v, attn_mask=allowed)[0].transpose(0, 1)


VARIANTS = {"padded + mask (bertkit)": padded, "nested jagged": nested, "per-length buckets": buckets,
            "block-diagonal mask": block_diagonal}


def timed(fn, qkv, lengths, backward: bool) -> float:
    x = qkv.clone().requires_grad_(backward)
    start = time.perf_counter()
    out = fn(x, lengths)
    if backward:
        out.sum().backward()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    qkv, lengths = batch(8, 128, 0.7)
    print(f"torch {torch.__version__}, {args.threads} threads; 8 x 128, {100 * (1 - lengths.sum() / 1024):.0f} % "
          f"padding, {HEADS} heads x {HEAD_DIM}, one layer's attention\n")
    reference = padded(qkv, lengths)
    diffs, usable = {}, {}
    for name, fn in VARIANTS.items():
        try:
            diffs[name] = (fn(qkv, lengths) - reference).abs().max().item()
            usable[name] = fn
        except (RuntimeError, NotImplementedError) as error:  # a torch build without the kernel
            print(f"{name}: not available here ({str(error).splitlines()[0][:100]})")
    print("| variant | forward ms | forward + backward ms | x padded (fwd) | x padded (fwd+bwd) | max diff |")
    print("|---|---|---|---|---|---|")
    results = {}
    for backward in (False, True):
        times = {name: [] for name in usable}
        for r in range(args.rounds + 1):
            for name, fn in usable.items():
                t = timed(fn, qkv, lengths, backward)
                if r:
                    times[name].append(t)
        for name in usable:
            results.setdefault(name, []).append(statistics.median(times[name]))
    base = results["padded + mask (bertkit)"]
    for name, (fwd, both) in results.items():
        print(f"| {name} | {1e3 * fwd:.2f} | {1e3 * both:.2f} | {base[0] / fwd:.2f} | {base[1] / both:.2f} "
              f"| {diffs[name]:.1e} |")


if __name__ == "__main__":
    main()
