"""Sections ``pretrain_objectives`` (``bertkit pretrain --objective electra`` and ``--recipe roberta`` on the device, a
fresh process each: the run ends, the loss falls, HF reads the outputs alike) and ``determinism`` (the same seeded
run twice: are the weights bit-identical, by default and under deterministic algorithms)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import torch

from cuda_checks.common import FAILED, failure_noted, record, table

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
            with failure_noted(row, "steps", f"{label} {precision}"):
                result = pretrain_command(args, device, workdir, out, *flags, "--precision", precision,
                                          "--log-every", "5", "--seed", "0")
                train = result["train"]
                row.update({"steps": train[-1]["step"], "loss first log": train[0]["loss"],
                            "loss last log": train[-1]["loss"], "loss fell": train[-1]["loss"] < train[0]["loss"],
                            "non-finite steps": train[-1].get("nonfinite_steps"),
                            "steps/s (after 1st log)": steps_per_s(train), "process s": result["seconds"],
                            "device": result["run"]["training"]["device"],
                            "bertkit vs HF logits (fp32)": load_check(flags[1], out, device)})
            table(title, rows, partial=True)
    table(title, rows)
    if any(r.get("steps") == FAILED for r in rows):
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
            with failure_noted(row, "files bit-identical", f"determinism {precision} {row['mode']}"):
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
            table(title, rows, partial=True)
    table(title, rows)
    if any(r.get("files bit-identical") == FAILED for r in rows):
        raise RuntimeError("a pair of runs failed (see their tracebacks)")
