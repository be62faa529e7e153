"""Section ``training``: bertkit's ``Trainer`` pretraining (MLM + NSP) a small BERT from scratch on learnable synthetic
sequences through ``PretrainingCollator`` in each precision; and the pieces the ``ddp`` section trains with."""

from __future__ import annotations

import json
import time
from pathlib import Path

import torch

from cuda_checks.common import QUICK_PRETRAIN, SMALL_PRETRAIN, SPECIAL, sync, table


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
    cfg = SMALL_PRETRAIN if not args.quick else QUICK_PRETRAIN
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
