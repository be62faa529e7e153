"""Training a SPLADE model, one step at a time: bertkit beside sentence-transformers, time per optimizer step.

Both train the same SPLADE model (the base's masked-LM head, max-pooled log(1 + ReLU)) with SpladeLoss around
multiple-negatives ranking (FLOPS regularisers on queries and documents at full weight) on the same batches of
inverse-cloze pairs from the bundled novels (``sparse_data.py``), fp32, on the CPU. A step is timed whole:
tokenizing the two columns, forward, loss, backward, gradient clipping at 1.0 and AdamW (bertkit's
``SparseBiEncoder`` as ``bertkit finetune sparse`` builds it; sentence-transformers' ``SparseEncoder`` with its
``SpladeLoss``, as its trainer runs it). The two step functions run in turn, ``--rounds`` times after a warm-up;
medians, and the ratio.

Two bases: ``demo`` (``--base``, default ``runs/demo/model``, what ``make demo`` writes: a tiny BERT with a
4,000-entry vocabulary, the base of ``sparse_quality.py``) and ``mini-30k`` (a randomly initialised BERT of 4
layers of 256 with bert-base-uncased's 30,522-entry vocabulary, built here with a fixed seed: the vocabulary
projection of every token is then most of the work, as in real SPLADE models).

    python benchmarks/sparse_train_speed.py                     # both bases, batch 32, 5 rounds
    python benchmarks/sparse_train_speed.py --bases mini-30k --rounds 3 --threads 1

Writes ``benchmarks/results/sparse_train_speed.json`` (``--json``). Needs the test extras. Nothing is asserted.
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
from sparse_data import TRAIN_BOOKS, book_pairs  # noqa: E402

QUERY_WEIGHT, DOCUMENT_WEIGHT = 5e-5, 3e-5


def random_mlm(directory: Path) -> str:
    """A randomly initialised BERT masked-LM (4 layers of 256, bert-base-uncased's vocabulary), seed 0."""
    from transformers import BertConfig, BertForMaskedLM, BertTokenizerFast

    from bertkit.resources import BERT_BASE_UNCASED_VOCAB

    torch.manual_seed(0)
    config = BertConfig(vocab_size=30522, hidden_size=256, num_hidden_layers=4, num_attention_heads=4,
                        intermediate_size=1024)
    BertForMaskedLM(config).save_pretrained(directory)
    BertTokenizerFast(vocab_file=str(BERT_BASE_UNCASED_VOCAB), do_lower_case=True).save_pretrained(directory)
    return str(directory)


# ------------------------------------------------------------------------------------------- step functions
def bertkit_step(base: str, max_seq_length: int, work: Path) -> Callable[[list], float]:
    """``step(pairs) -> loss``: one optimizer step of what ``bertkit finetune sparse`` trains."""
    from bertkit.sentence.data import RowBatch
    from bertkit.sentence.sparse import SparseEncoder
    from bertkit.sentence.sparse_build import new_sparse_encoder
    from bertkit.sentence.sparse_training import SparseBiEncoder, SparseCollator, SparseLoss
    from bertkit.training.gradnorm import clip_grad_norm

    new_sparse_encoder(base, work / "bertkit-model", max_seq_length=max_seq_length)
    net = SparseEncoder(work / "bertkit-model", dtype="fp32", optimize=False).train()
    loss = SparseLoss(query_weight=QUERY_WEIGHT, document_weight=DOCUMENT_WEIGHT, warmup=0.0).build(False)
    module = SparseBiEncoder(net, loss)
    collate = SparseCollator(net.tokenizer, router=False, max_length=max_seq_length)
    params = [p for p in module.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=2e-5, fused=True)

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


def st_step(base: str, max_seq_length: int, work: Path) -> Callable[[list], float]:
    """``step(pairs) -> loss``: one optimizer step as sentence-transformers' SparseEncoderTrainer runs it."""
    from sentence_transformers import SparseEncoder
    from sentence_transformers.base.modules import Transformer
    from sentence_transformers.sparse_encoder.losses import SparseMultipleNegativesRankingLoss, SpladeLoss
    from sentence_transformers.sparse_encoder.modules import SpladePooling

    model = SparseEncoder(modules=[Transformer(base, transformer_task="fill-mask", max_seq_length=max_seq_length),
                                   SpladePooling("max")], device="cpu")
    model.train()
    loss = SpladeLoss(model, SparseMultipleNegativesRankingLoss(model), query_regularizer_weight=QUERY_WEIGHT,
                      document_regularizer_weight=DOCUMENT_WEIGHT)
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=2e-5, fused=True)

    def step(pairs: list[tuple[str, str]]) -> float:
        features = [model.preprocess([q for q, _ in pairs]), model.preprocess([d for _, d in pairs])]
        value = sum(loss(features, None).values())  # the trainer sums SpladeLoss's parts
        value.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return value.item()

    return step


STEPS = {"bertkit": bertkit_step, "sentence-transformers": st_step}


def speed(name: str, base: str, args, work: Path) -> list[dict]:
    """Both step functions in turn on the same batches; a row per trainer (median ms/step, the ratio)."""
    pairs = book_pairs(TRAIN_BOOKS)[: args.batch_size * (args.rounds + 1)]
    batches = [pairs[i * args.batch_size:(i + 1) * args.batch_size] for i in range(args.rounds + 1)]
    steps = {trainer: make(base, args.max_seq_length, work) for trainer, make in STEPS.items()}
    times: dict[str, list[float]] = {trainer: [] for trainer in steps}
    losses: dict[str, list[float]] = {trainer: [] for trainer in steps}
    for r, batch in enumerate(batches):  # round 0 warms up
        for trainer, step in steps.items():
            start = time.perf_counter()
            losses[trainer].append(step(batch))
            if r:
                times[trainer].append(time.perf_counter() - start)
    st = statistics.median(times["sentence-transformers"])
    return [{"base": name, "batch": args.batch_size, "max_seq_length": args.max_seq_length, "trainer": trainer,
             "ms/step": round(1000 * statistics.median(seconds), 1),
             "x sentence-transformers": round(st / statistics.median(seconds), 2),
             "first loss": round(losses[trainer][0], 4)} for trainer, seconds in times.items()]


def main(argv: list[str] | None = None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base", type=Path, default=Path("runs/demo/model"), help="the demo base's directory")
    parser.add_argument("--bases", nargs="+", default=["demo", "mini-30k"], choices=["demo", "mini-30k"])
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--max-seq-length", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    parser.add_argument("--json", type=Path, default=HERE / "results" / "sparse_train_speed.json")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    import sentence_transformers

    header = {"torch": torch.__version__, "sentence-transformers": sentence_transformers.__version__,
              "threads": torch.get_num_threads(), "precision": "fp32", "rounds": args.rounds}
    print(header, flush=True)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.bases:
            work = Path(tmp) / name
            work.mkdir()
            base = str(args.base) if name == "demo" else random_mlm(work / "base")
            rows += speed(name, base, args, work)
            print(record.markdown(rows[-2:]), flush=True)
    notes = [f"fp32, {header['threads']} thread(s), {args.rounds} timed rounds after one warm-up (medians); "
             f"SpladeLoss(MNRL) with FLOPS at query {QUERY_WEIGHT} / document {DOCUMENT_WEIGHT}, clip 1.0, AdamW",
             "demo: runs/demo/model (make demo; 4,000-token vocabulary); mini-30k: random BERT 4x256, 30,522 tokens"]
    record.write_result(args.json, "sparse_train_speed", [record.table(
        "SPLADE training step: bertkit vs sentence-transformers", rows, notes=notes)],
        title="Learned-sparse training speed (one SPLADE step)", data={"settings": header, "rows": rows})
    print("\n" + record.markdown(rows))
    return rows


if __name__ == "__main__":
    main()
