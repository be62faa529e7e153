"""DeBERTa-v3 fine-tuning: bertkit's ``finetune classify`` beside HF's ``Trainer`` on the same checkpoint, per seed.

The checkpoint, built at start in a temporary directory (nothing is downloaded):

1. the tokenizer: a SentencePiece Unigram ``spm.model`` trained on the six bundled Austen novels (the
   ``sentencepiece`` trainer of the test extra; ``--vocab-size``, default 8000) with DeBERTa-v3's ids ([PAD] 0,
   [CLS] 1, [SEP] 2, [UNK] 3) and deberta-v3-base's ``tokenizer_config.json`` (with the class named); bertkit
   reads it with its own reader, transformers with ``DebertaV2Tokenizer`` (and protobuf): the same ids, so both
   sides see the same features;
2. the model: a small DeBERTa-v3 (``SIZE``: hidden 128, 2 layers; the rest ``bertkit.DeBERTaV2Config``'s, i.e.
   deberta-v3-base's: relative attention c2p + p2c over 256 log buckets, shared keys, no absolute positions, no
   token types) initialised by bertkit with ``--seed-init`` and saved as HF's ``DebertaV2ForMaskedLM`` directory.
   Random weights, not pretrained: ``bertkit pretrain --init-from`` continues BERT checkpoints only (it needs a
   next-sentence head), and a run from scratch learns its own WordPiece vocabulary, not this spm.model.

Fine-tuning (``classify_reference.py``'s recipe but the learning rate, 5e-4 for a model trained from random
weights: at 1e-4 it stays near the majority class): classification of ``data/finetune/vader_amazon`` (2,389
training, 298 test sentences), 3 epochs, batch 32, max length 64, fp32, the final model scored on the test split;
every side of a seed starts from the same checkpoint with the same seed. Sides (``--sides``, default the first
two):

* ``trainer``: HF's ``DebertaV2ForSequenceClassification`` trained by HF's ``Trainer`` at its defaults (no warmup,
  no weight decay: :func:`finetune.run_hf_trainer`);
* ``bertkit-hf``: ``bertkit.tasks.finetune("classify", ...)`` (what ``bertkit finetune classify`` runs) with the
  Trainer's warmup and weight decay (0 and 0): the same hyper-parameters;
* ``bertkit``: the same at ``bertkit finetune classify``'s defaults (warmup 10 %, weight decay 0.01).

Prints one line per run and a table per metric (accuracy, macro-F1; per seed, mean, sample sd) and the seconds per
epoch (training wall time, on ``--threads`` threads); ``--json`` writes them (``benchmarks/record.py``; the load
average at the start and end is in its header). ::

    .venv/bin/python benchmarks/deberta_finetune.py --json benchmarks/results/deberta-finetune.json
"""

from __future__ import annotations

import argparse
import io
import json
import statistics
import sys
import tempfile
import warnings
from pathlib import Path

import torch
import transformers

sys.path.insert(0, str(Path(__file__).resolve().parent))
import classify_reference as reference  # benchmarks/classify_reference.py: the sides and their table rows
import finetune as bench  # benchmarks/finetune.py: both libraries' runners
import record

import bertkit
from bertkit.resources import austen_novels

SIDES = ("trainer", "bertkit-hf", "bertkit")
METRICS = ("accuracy", "macro_f1")
#: the size (the rest is DeBERTa-v3's: bertkit.DeBERTaV2Config) two busy cores fine-tune in minutes
SIZE = dict(hidden_size=128, num_hidden_layers=2, num_attention_heads=4, intermediate_size=512)
#: deberta-v3-base's tokenizer_config.json, with the class named (the tokenizer is read before config.json exists)
TOKENIZER_CONFIG = {"do_lower_case": False, "vocab_type": "spm", "tokenizer_class": "DebertaV2Tokenizer"}


def novel_lines() -> list[str]:
    return [line for text in austen_novels().values() for line in text.splitlines() if line.strip()]


def write_tokenizer(directory: Path, vocab_size: int) -> None:
    """An ``spm.model`` trained on the novels, with DeBERTa-v3's special ids, and its tokenizer_config.json."""
    import sentencepiece  # test-only: it trains the model; bertkit reads the file without it

    model = io.BytesIO()
    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter(novel_lines()), model_writer=model, vocab_size=vocab_size, num_threads=2,
        minloglevel=2, pad_id=0, bos_id=1, eos_id=2, unk_id=3, pad_piece="[PAD]", bos_piece="[CLS]",
        eos_piece="[SEP]", unk_piece="[UNK]")
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "spm.model").write_bytes(model.getvalue())
    (directory / "tokenizer_config.json").write_text(json.dumps(TOKENIZER_CONFIG))


def write_init(directory: Path, vocab_size: int, seed: int) -> None:
    """The randomly initialised masked-LM checkpoint (``vocab_size``: the tokenizer's, [MASK] included), written by
    bertkit as HF's ``DebertaV2ForMaskedLM`` directory."""
    torch.manual_seed(seed)
    config = bertkit.DeBERTaV2Config(vocab_size=vocab_size, **SIZE)
    bertkit.BERTForMaskedLM(config).save_pretrained(directory)


def build_checkpoint(root: Path, args: argparse.Namespace) -> tuple[Path, dict]:
    """The checkpoint both sides fine-tune, and what it is."""
    init = root / "init"
    write_tokenizer(init, args.vocab_size)
    tokenizer = bertkit.AutoTokenizer.from_pretrained(init)
    write_init(init, len(tokenizer), args.seed_init)
    return init, {"tokenizer": f"spm.model, Unigram, {tokenizer.vocab_size} pieces + [MASK]",
                  "init": "random (bertkit.DeBERTaV2Config)", "seed_init": args.seed_init, "size": SIZE}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sides", nargs="+", choices=SIDES, default=list(SIDES[:2]))
    parser.add_argument("--seeds", nargs="+", type=int, default=[7, 1, 13])
    parser.add_argument("--seed-init", type=int, default=0)
    parser.add_argument("--vocab-size", type=int, default=8000)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--learning-rate", type=float, default=5e-4)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--json", type=Path, help="write the tables and every run here (benchmarks/record.py)")
    args = parser.parse_args()
    args.batch_size, args.precision = 32, "fp32"
    torch.set_num_threads(args.threads)
    bench.HF_HEADS["classify"] = transformers.DebertaV2ForSequenceClassification  # the HF side's head here
    name = "vader_amazon"
    with tempfile.TemporaryDirectory(prefix="bertkit-deberta-") as tmp:
        args.model_dir, made = build_checkpoint(Path(tmp), args)
        train, test = bench.DATA / name / "train.tsv.xz", bench.DATA / name / "test.tsv.xz"
        job = bench.Job("classify", name, train, test, 64, {"text_column": "sentence"})
        job.hf_padding = "dynamic"
        print(f"{name}: train {len(job.train_examples)}, test {len(job.test_examples)}; sides {args.sides}; "
              f"seeds {args.seeds}; threads {torch.get_num_threads()}", flush=True)
        scores = {metric: {side: {} for side in args.sides} for metric in METRICS}
        runs: dict[str, dict[int, dict]] = {side: {} for side in args.sides}
        for seed in args.seeds:
            for side in args.sides:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    result = reference.run(side, job, seed, args, Path(tmp))
                runs[side][seed] = result
                for metric in METRICS:
                    scores[metric][side][seed] = result[metric]
                print(f"seed {seed} {side}: accuracy {result['accuracy']:.3f}, macro-F1 {result['macro_f1']:.3f} "
                      f"({result['seconds_per_epoch']:.1f} s/epoch)", flush=True)
    tables = []
    for metric in METRICS:
        print(f"\n{name}, test {metric}\n" + bench.seed_table(scores[metric], args.seeds), flush=True)
        tables.append(record.table(f"{name}: test {metric}", reference.rows(scores[metric], args.seeds)))
    tables.append(record.table("seconds per epoch (training wall time)", time_rows(runs, args.seeds)))
    print("\n" + record.markdown(tables[-1]["rows"]))
    if args.json is not None:
        record.write_result(args.json, "deberta-finetune", tables, data={"runs": runs, "checkpoint": made, "recipe": {
            "dataset": name, "epochs": args.epochs, "learning_rate": args.learning_rate,
            "batch_size": args.batch_size, "max_seq_length": 64, "precision": args.precision,
            "threads": args.threads}}, title="Fine-tuning DeBERTa-v3: bertkit's classify beside HF's Trainer, per seed")
        print(f"\nwrote {args.json}")


def time_rows(runs: dict[str, dict[int, dict]], seeds: list[int]) -> list[dict]:
    out = []
    for side, per_seed in runs.items():
        values = [per_seed[s]["seconds_per_epoch"] for s in seeds]
        out.append({"side": side, **{f"seed {s}": f"{v:.2f}" for s, v in zip(seeds, values)},
                    "mean": f"{statistics.fmean(values):.2f}"})
    return out


if __name__ == "__main__":
    main()
