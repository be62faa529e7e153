"""Section ``families``: RoBERTa, XLM-RoBERTa, MPNet, DistilBERT, ELECTRA and ModernBERT, each an HF masked-LM
checkpoint of tiny odd sizes with random weights read by bertkit: bertkit.BERT vs HF's AutoModel on the device
(fp32 / bf16, sdpa / eager, rows full, right- and left-padded), both against HF in float64 on the CPU;
BERTForMaskedLM's loss and gradients in fp32 vs bf16 autocast; a BERT-base-sized ModernBERT forward timed."""

from __future__ import annotations

import warnings
from functools import partial
from pathlib import Path

import torch
from timing import interleaved

from cuda_checks.common import (
    DTYPES,
    FAILED,
    failure_noted,
    hf_last_hidden,
    padded_inputs,
    run_ours,
    sdpa_ops,
    sync,
    table,
)

#: the families bertkit reads besides BERT, each as HF's masked-LM class at tiny odd sizes (hidden 36, 3 heads x 12,
#: inner 52, vocab 99), dropout 0.1 (off in eval mode); rows of ``length`` tokens (MPNet: 140, so every relative
#: position bucket is used, the last (>= 128) too; ModernBERT: layers global, local (window 8), global)
FAMILY_SIZES = dict(vocab_size=99, hidden_size=36, num_hidden_layers=2, num_attention_heads=3, intermediate_size=52)
FAMILY_LENGTH = {"roberta": 48, "xlm-roberta": 48, "mpnet": 140, "distilbert": 48, "electra": 48, "modernbert": 48}
FAMILY_PAD = {"roberta": 1, "xlm-roberta": 1, "mpnet": 1, "distilbert": 0, "electra": 0, "modernbert": 1}


def family_config(family: str, length: int):
    """HF's config of ``family`` at :data:`FAMILY_SIZES` with positions for ``length`` tokens."""
    import transformers

    bert_like = dict(**FAMILY_SIZES, hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1)
    ids = dict(pad_token_id=1, bos_token_id=0, eos_token_id=2)
    if family in ("roberta", "xlm-roberta"):  # positions start after the padding id
        cls = transformers.RobertaConfig if family == "roberta" else transformers.XLMRobertaConfig
        return cls(**bert_like, **ids, max_position_embeddings=length + 3, type_vocab_size=1)
    if family == "mpnet":
        return transformers.MPNetConfig(**bert_like, **ids, max_position_embeddings=length + 5, layer_norm_eps=1e-5)
    if family == "distilbert":
        return transformers.DistilBertConfig(vocab_size=99, dim=36, n_layers=2, n_heads=3, hidden_dim=52,
                                             max_position_embeddings=length, pad_token_id=0, dropout=0.1,
                                             attention_dropout=0.1)
    if family == "electra":
        return transformers.ElectraConfig(**bert_like, max_position_embeddings=length, pad_token_id=0,
                                          embedding_size=20)
    if family == "modernbert":
        return transformers.ModernBertConfig(**dict(FAMILY_SIZES, num_hidden_layers=3), **ids, cls_token_id=0,
                                             sep_token_id=2, max_position_embeddings=length,
                                             global_attn_every_n_layers=2, local_attention=8,
                                             global_rope_theta=1000.0, local_rope_theta=100.0, attention_dropout=0.1,
                                             mlp_dropout=0.1, embedding_dropout=0.1)
    raise ValueError(family)


def randomized(model: torch.nn.Module, seed: int, std: float = 0.1) -> torch.nn.Module:
    """Every parameter random (``std``), LayerNorm gains near 1 whatever the family names them."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for module in model.modules():
            for name, p in module.named_parameters(recurse=False):
                noise = torch.randn(p.shape, generator=g) * std
                gain = isinstance(module, torch.nn.LayerNorm) and name == "weight"
                p.copy_(1.0 + noise if gain else noise)
    return model


def hf_backbone(directory: Path, impl: str, dtype: torch.dtype, device: torch.device):
    """HF's ``AutoModel`` of ``directory`` with ``impl`` attention, or eager where HF's class has no SDPA (MPNet):
    ``(model, the implementation HF runs)``."""
    import transformers

    try:
        model = transformers.AutoModel.from_pretrained(directory, attn_implementation=impl)
    except ValueError:  # "does not support an attention implementation through torch.nn.functional.sdpa"
        model = transformers.AutoModel.from_pretrained(directory, attn_implementation="eager")
    return model.to(device=device, dtype=dtype).eval(), model.config._attn_implementation


def quiet_load(cls, directory: Path, **kw):
    """``cls.from_pretrained`` without the LoadWarning of a head dropped or a pooler absent (expected here)."""
    from bertkit import LoadWarning

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", LoadWarning)
        return cls.from_pretrained(directory, **kw)


def family_parity(family: str, directory: Path, device: torch.device, dtypes: list[str]) -> list[dict]:
    """bertkit.BERT vs HF's backbone on ``device`` (fp32 / bf16, sdpa / eager), both vs HF in float64 on the CPU
    (eager; sdpa where eager gives NaN at a real token); rows alternately full, right-padded (a quarter) and
    left-padded (a third)."""
    import bertkit
    from bertkit.modeling import fast
    from family_parity import padded_batch

    length, pad = FAMILY_LENGTH[family], FAMILY_PAD[family]
    ids, mask = padded_batch(99, pad, 6, length, right=length // 4, left=length // 3, lowest_id=4)
    real, left_rows = mask.bool(), torch.arange(6) % 3 == 2
    for ref_impl in ("eager", "sdpa"):  # HF's ModernBERT eager in float64 gives NaN rows where a row is padded
        ref_model, _ = hf_backbone(directory, ref_impl, torch.float64, torch.device("cpu"))
        with torch.inference_mode():
            ref = ref_model(input_ids=ids, attention_mask=mask).last_hidden_state
        if torch.isfinite(ref[real]).all():
            break
    ids, mask, ref, real, left_rows = (t.to(device) for t in (ids, mask, ref, real, left_rows))

    def diff(a, b, where=real):
        return (a.double() - b.double())[where].abs().max().item()

    rows = []
    for dtype_name in dtypes:
        dtype = DTYPES[dtype_name]
        for impl in ("sdpa", "eager"):
            hf, hf_impl = hf_backbone(directory, impl, dtype, device)
            ours = quiet_load(bertkit.BERT, directory, attn_implementation=impl).eval()
            ours = bertkit.optimize_for_inference(ours, dtype=None if dtype == torch.float32 else dtype, device=device)
            with torch.inference_mode():
                theirs = hf(input_ids=ids, attention_mask=mask).last_hidden_state
                got = ours(ids, mask)[0]
                with fast.fast_path(False):
                    plain = ours(ids, mask)[0]
                kernel = sdpa_ops(partial(ours, ids, mask)) if impl == "sdpa" else "-"
            left = real & left_rows[:, None]
            ours_error, hf_error = diff(got, ref), diff(theirs, ref)
            rows.append({"family": family, "dtype": dtype_name, "attention (ours / HF)": f"{impl} / {hf_impl}",
                         "batch": f"6 x {length}, {int(real.sum())} real", "bertkit vs HF": diff(got, theirs),
                         "bertkit vs fp64": ours_error, "HF vs fp64": hf_error,
                         "bertkit within 2 x HF's error": ours_error <= max(2 * hf_error, 1e-5),
                         "plain path vs fp64": diff(plain, ref), "left-padded rows vs fp64": diff(got, ref, left),
                         "fp64 reference": f"HF {ref_impl}", "max abs fp64": ref[real].abs().max().item(),
                         "finite": bool(torch.isfinite(got[real]).all()), "bertkit's SDPA op": kernel})
            del hf, ours
    return rows


def loss_and_grads(model, labels, ids, mask, *, train: bool, bf16: bool) -> tuple[float, dict[str, torch.Tensor]]:
    """``model.get_loss`` (train or eval mode, bf16 autocast or not), backward: the loss and each gradient (fp32)."""
    model.train(train)
    model.zero_grad(set_to_none=True)
    with torch.autocast(ids.device.type, dtype=torch.bfloat16, enabled=bf16):
        loss = model.get_loss(labels, input_ids=ids, attention_mask=mask)
    loss.backward()
    return loss.item(), {n: p.grad.float() for n, p in model.named_parameters() if p.grad is not None}


def family_backward(family: str, directory: Path, device: torch.device) -> list[dict]:
    """``BERTForMaskedLM``'s loss on ``device``: in eval mode fp32 vs bf16 autocast (loss and the relative distance
    of all gradients), and a training-mode step (dropout 0.1) under bf16 autocast, which must give finite gradients."""
    import bertkit
    from family_parity import padded_batch, token_labels

    length = FAMILY_LENGTH[family]
    ids, mask = padded_batch(99, FAMILY_PAD[family], 6, length, right=length // 4, left=length // 3, lowest_id=4)
    labels = token_labels({"attention_mask": mask}, 99).to(device)
    ids, mask = ids.to(device), mask.to(device)
    rows = []
    for impl in ("sdpa", "eager"):
        model = quiet_load(bertkit.BERTForMaskedLM, directory, attn_implementation=impl).to(device)
        step = partial(loss_and_grads, model, labels, ids, mask)
        fp32_loss, fp32_grads = step(train=False, bf16=False)
        bf16_loss, bf16_grads = step(train=False, bf16=True)
        train_loss, train_grads = step(train=True, bf16=True)
        flat = torch.cat([g.flatten() for g in fp32_grads.values()])
        delta = torch.cat([(bf16_grads[n] - g).flatten() for n, g in fp32_grads.items()])
        rows.append({"family": family, "attention": impl, "loss fp32": fp32_loss, "loss bf16 autocast": bf16_loss,
                     "grad rel. distance bf16 vs fp32": (delta.norm() / flat.norm()).item(),
                     "params without grad": sum(p.grad is None for p in model.parameters()),
                     "train step (dropout, bf16) loss": train_loss,
                     "train grads finite": all(bool(torch.isfinite(g).all()) for g in train_grads.values())})
        del model
    return rows


def modernbert_timing(args, device: torch.device, workdir: Path) -> list[dict]:
    """A BERT-base-sized ModernBERT (12 layers, hidden 768, GLU inner 1152, window 128, every third layer global),
    bertkit vs HF forward in bf16 (fp32 on the CPU), batches of 32 x 128 full and with 30 % padding."""
    import transformers

    import bertkit

    sizes = dict(hidden_size=768, num_hidden_layers=12, num_attention_heads=12, intermediate_size=1152)
    if args.quick:
        sizes = dict(hidden_size=64, num_hidden_layers=3, num_attention_heads=4, intermediate_size=96)
    length, batch = (128, 32) if not args.quick else (48, 4)
    config = transformers.ModernBertConfig(**sizes, vocab_size=50368, max_position_embeddings=512,
                                           global_attn_every_n_layers=3, local_attention=128 if not args.quick else 16,
                                           pad_token_id=50283, bos_token_id=50281, eos_token_id=50282,
                                           cls_token_id=50281, sep_token_id=50282)
    torch.manual_seed(0)
    directory = workdir / "modernbert-base-sized"
    transformers.ModernBertModel(config).save_pretrained(directory)
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    models = {}
    for impl in ("sdpa", "eager"):
        models[f"HF {impl}"] = hf_backbone(directory, impl, dtype, device)[0]
        ours = quiet_load(bertkit.BERT, directory, attn_implementation=impl).eval()
        models[f"bertkit {impl}"] = bertkit.optimize_for_inference(
            ours, dtype=None if dtype == torch.float32 else dtype, device=device)
    rows = []
    for name, real in ((f"{batch} x {length}", 1.0), (f"{batch} x {length}, 30 % padding", 0.7)):
        ids, mask, _ = (t.to(device) for t in padded_inputs(batch, length, 50000, 1, real, seed=6))
        variants = {v: partial(hf_last_hidden if v.startswith("HF") else run_ours, m, ids, mask, None)
                    for v, m in models.items()}
        with torch.inference_mode():
            outputs = {v: fn() for v, fn in variants.items()}
            outputs = {v: out[0] if isinstance(out, tuple) else out for v, out in outputs.items()}
            seconds = interleaved(variants, args.rounds, calls=args.iters, sync=partial(sync, device))
        real_tokens = mask.bool()
        for v, s in seconds.items():
            gap = (outputs[v][real_tokens].float() - outputs["HF sdpa"][real_tokens].float()).abs().max().item()
            rows.append({"workload": name, "variant": v, "ms": 1e3 * s, "sequences/s": batch / s,
                         "x HF sdpa": seconds["HF sdpa"] / s, "max abs diff vs HF sdpa": gap})
    del models
    return rows


def families(args, device: torch.device, workdir: Path) -> None:
    import transformers

    titles = ("Families: bertkit.BERT vs HF's AutoModel of the family (same HF checkpoint), last hidden state at real "
              "tokens, max abs diff (fp64 = HF in float64 on the CPU: eager, or sdpa where HF's eager gives NaN)",
              "Families: BERTForMaskedLM loss and gradients (eval mode: fp32 vs bf16 autocast; training mode with "
              "dropout 0.1 under bf16 autocast)")
    parity_rows, backward_rows, failed = [], [], []
    for family in FAMILY_LENGTH:
        status = {"family": family}
        with failure_noted(status, "dtype", f"FAMILY {family}"):
            directory = workdir / f"family-{family}"
            torch.manual_seed(0)
            model = transformers.AutoModelForMaskedLM.from_config(family_config(family, FAMILY_LENGTH[family]))
            randomized(model, seed=0).save_pretrained(directory)
            parity_rows += family_parity(family, directory, device, ["fp32", "bf16"])
            backward_rows += family_backward(family, directory, device)
        if status.get("dtype") == FAILED:
            failed.append(family)
            parity_rows.append(status)
        if device.type == "cuda":
            torch.cuda.empty_cache()
        table(titles[0], parity_rows, partial=True)
        table(titles[1], backward_rows, partial=True)
    table(titles[0], parity_rows)
    table(titles[1], backward_rows)
    rows = modernbert_timing(args, device, workdir)
    table(f"ModernBERT ({'BERT-base-sized, 12 layers' if not args.quick else 'small'}) forward, "
          f"{'bf16' if device.type == 'cuda' else 'fp32'}, "
          f"inference_mode, median of {args.rounds} rounds x {args.iters} calls", rows)
    if failed:
        raise RuntimeError(f"families failed (see their tracebacks): {', '.join(failed)}")
