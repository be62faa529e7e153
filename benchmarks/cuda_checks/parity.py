"""Sections ``parity`` (bertkit.BERT vs HF's BertModel on the same weights, both against HF in float64) and
``sdpa`` (which ``scaled_dot_product_attention`` kernel runs, and which accept bertkit's calls when forced)."""

from __future__ import annotations

import copy
import warnings
from functools import partial
from pathlib import Path

import torch

from cuda_checks.common import (
    BASE,
    DTYPES,
    ODD,
    QUICK_BASE,
    hf_and_bertkit,
    padded_inputs,
    run_hf,
    run_ours,
    sdpa_ops,
    table,
)


def parity(args, device: torch.device, workdir: Path) -> None:
    from bertkit.modeling import fast

    configs = [("odd tiny (H36, 3 heads x 12, inner 37)", ODD, 0.2, (4, 33)),
               ("BERT-base" if not args.quick else "small", BASE if not args.quick else QUICK_BASE, None, (8, 128))]
    rows = []
    for name, cfg, std, (b, length) in configs:
        load = hf_and_bertkit(cfg, workdir, std=std)
        vocab, types = cfg.get("vocab_size", 30522), cfg.get("type_vocab_size", 2)
        ids, mask, tt = (t.to(device) for t in padded_inputs(b, length, vocab, types, 0.7, seed=1))
        real = mask.bool()
        ref_model = load("hf", "eager", torch.float64, device)  # loaded outside inference_mode (see below)
        with torch.inference_mode():
            ref_seq = run_hf(ref_model, ids, mask, tt)[0]
        del ref_model
        for dtype_name in args.dtypes:
            dtype = DTYPES[dtype_name]
            for impl in ("sdpa", "eager"):
                # parameters created under inference_mode are inference tensors, which CPU kernels prepared by
                # optimize_for_inference cannot version-check: models are built outside it
                hf = load("hf", impl, dtype, device)
                ours = load("ours", impl, dtype, device)
                with torch.inference_mode():
                    hf_seq, hf_pool = run_hf(hf, ids, mask, tt)
                    our_seq, our_pool = run_ours(ours, ids, mask, tt)
                    with fast.fast_path(False):  # the plain (padded) path too
                        plain_seq, _ = run_ours(ours, ids, mask, tt)

                def diff(a, c):
                    return (a.double() - c.double()).abs().max().item()

                rows.append({"config": name, "batch": f"{b} x {length}, {int(real.sum())} real", "dtype": dtype_name,
                             "attention": impl, "bertkit vs HF": diff(our_seq[real], hf_seq[real]),
                             "pooled vs HF": diff(our_pool, hf_pool),
                             "bertkit vs fp64": diff(our_seq[real], ref_seq[real]),
                             "HF vs fp64": diff(hf_seq[real], ref_seq[real]),
                             "bertkit plain path vs fp64": diff(plain_seq[real], ref_seq[real]),
                             "bertkit finite": bool(torch.isfinite(our_seq[real]).all())})
                del hf, ours
        if device.type == "cuda":
            torch.cuda.empty_cache()
    table("Parity: last hidden state at real tokens, max abs diff (fp64 = HF eager in float64)", rows)


def sdpa(args, device: torch.device, workdir: Path) -> None:
    from torch.nn.attention import SDPBackend, sdpa_kernel

    backends = {"flash": SDPBackend.FLASH_ATTENTION, "mem-efficient": SDPBackend.EFFICIENT_ATTENTION,
                "math": SDPBackend.MATH}
    if hasattr(SDPBackend, "CUDNN_ATTENTION"):
        backends["cudnn"] = SDPBackend.CUDNN_ATTENTION
    cfg = BASE if not args.quick else QUICK_BASE
    load = hf_and_bertkit(cfg, workdir, std=None)
    dispatch, forced = [], []
    for dtype_name in args.dtypes:
        dtype = DTYPES[dtype_name]
        ours, hf = load("ours", "sdpa", dtype, device), load("hf", "sdpa", dtype, device)
        for label, real in (("8 x 128 full rows", 1.0), ("8 x 128, 30 % padding", 0.7)):
            ids, mask, tt = (t.to(device) for t in padded_inputs(8, 128, 30522, 2, real, seed=2))
            with torch.inference_mode():
                reference = run_ours(ours, ids, mask, tt)[0]
                dispatch.append({"dtype": dtype_name, "batch": label,
                                 "bertkit default": sdpa_ops(partial(run_ours, ours, ids, mask, tt)),
                                 "HF default": sdpa_ops(partial(run_hf, hf, ids, mask, tt))})
                row = {"dtype": dtype_name, "batch": label}
                for name, backend in backends.items():
                    with warnings.catch_warnings(record=True) as caught:  # torch says why a kernel refuses
                        warnings.simplefilter("always")
                        try:
                            with sdpa_kernel([backend]):
                                out = run_ours(ours, ids, mask, tt)[0]
                            real_tokens = mask.bool()
                            d = (out[real_tokens].float() - reference[real_tokens].float()).abs().max().item()
                            row[name] = f"ok (diff {d:.1e})"
                        except RuntimeError as e:
                            why = [str(w.message).split("(Triggered internally")[0].strip() for w in caught]
                            why = [w for w in why if w and "not used because" not in w]
                            row[name] = "refused: " + ("; ".join(dict.fromkeys(why)) or str(e).splitlines()[0])[:160]
                forced.append(row)
        # training: forward + backward with dropout under bf16 autocast
        if dtype_name == "fp32":
            train = copy.deepcopy(ours).float().train()
            for m in train.modules():
                if hasattr(m, "dropout_p"):
                    m.dropout_p = 0.1
            ids, mask, tt = (t.to(device) for t in padded_inputs(8, 128, 30522, 2, 0.7, seed=3))

            def step(model=train, inputs=(ids, mask, tt)):
                with torch.autocast(device.type, dtype=torch.bfloat16):
                    seq = run_ours(model, *inputs)[0]
                seq.float().square().mean().backward()

            dispatch.append({"dtype": "bf16 autocast, training (dropout 0.1, fwd+bwd)",
                             "batch": "8 x 128, 30 % padding", "bertkit default": sdpa_ops(step), "HF default": "-"})
        del ours, hf
    table("SDPA implementation dispatched by default (profiler's aten op)", dispatch)
    table("bertkit (sdpa) with one SDPA backend forced (torch.nn.attention.sdpa_kernel); diff vs default dispatch",
          forced)
