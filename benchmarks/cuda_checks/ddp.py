"""Section ``ddp``: the Trainer under torchrun with a world-size-1 process group (NCCL on one GPU, gloo on the CPU),
the distributed path forced with a one-rank context, against a plain run; and a run stopped at step 10 and resumed.

The worker is ``cuda_check.py --ddp-worker DIR`` (so torchrun starts the same entry point as the user)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import torch

from cuda_checks.common import QUICK_PRETRAIN, SMALL_PRETRAIN, skip, table
from cuda_checks.training import pretraining_model, synthetic_pretraining, train_once

#: the entry point torchrun runs as the worker
SCRIPT = Path(__file__).resolve().parents[1] / "cuda_check.py"
DDP_STEPS, DDP_BATCH = 30, 32


def ddp_cfg(args) -> dict:
    return SMALL_PRETRAIN if not args.quick else QUICK_PRETRAIN


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

    device = "cuda" if torch.cuda.is_available() and not args.smoke else "cpu"
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
               "--master-addr=127.0.0.1", f"--master-port={port}", str(SCRIPT), "--ddp-worker", str(out)]
    if args.smoke:
        command += ["--device", "cpu"]
    elif args.quick:
        command.append("--quick")
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    if result.returncode != 0:
        raise RuntimeError(f"torchrun failed ({result.returncode}):\n{result.stdout[-3000:]}\n{result.stderr[-5000:]}")
    report = json.loads((out / "ddp_report.json").read_text())
    print("worker report:", json.dumps(report, indent=1))
    if device.type == "cpu":
        skip("ddp's NCCL process group and its all_reduce", "NCCL needs CUDA; on the CPU the group is gloo")

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
