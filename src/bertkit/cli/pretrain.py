"""``bertkit pretrain``: pretrain a BERT on prepared data (``--data``) or straight from text (``--text``).

    bertkit pretrain --data DATA_DIR --model tiny -o OUT [--max-steps N] [--batch-size B] ...
    bertkit pretrain --text FILE... --model tiny -o OUT [--vocab-size 8000] ...

Under ``torchrun --nproc-per-node N bertkit pretrain ...`` the run is data-parallel (DDP).
"""

from __future__ import annotations

import argparse
import json


def add_training_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("training")
    group.add_argument("--max-steps", type=int, default=1000)
    group.add_argument("--batch-size", type=int, default=64, help="global batch (examples per optimizer step)")
    group.add_argument("--gradient-accumulation-steps", type=int, default=1)
    group.add_argument("--learning-rate", type=float, default=1e-3)
    group.add_argument("--warmup-ratio", type=float, default=0.06)
    group.add_argument("--weight-decay", type=float, default=0.01)
    group.add_argument("--precision", choices=("auto", "fp32", "bf16", "fp16"), default="auto",
                       help="auto: bf16 where the hardware has it, else fp32")
    group.add_argument("--log-every", type=int, default=25)
    group.add_argument("--eval-every", type=int, default=None)
    group.add_argument("--save-every", type=int, default=None)
    group.add_argument("--keep-last", type=int, default=2)
    group.add_argument("--seed", type=int, default=42)
    group.add_argument("--device", default="auto")
    group.add_argument("--gradient-checkpointing", action="store_true")
    group.add_argument("--resume", action="store_true", help="continue from the latest checkpoint in -o")


def training_config(args: argparse.Namespace):
    from bertkit.training import TrainingConfig, cpu_supports_bf16

    precision = args.precision
    if precision == "auto":
        import torch

        precision = "bf16" if torch.cuda.is_available() or cpu_supports_bf16() else "fp32"
    return TrainingConfig(
        max_steps=args.max_steps, batch_size=args.batch_size,
        gradient_accumulation_steps=args.gradient_accumulation_steps, learning_rate=args.learning_rate,
        warmup_ratio=args.warmup_ratio, weight_decay=args.weight_decay, precision=precision,
        log_every=args.log_every, eval_every=args.eval_every, save_every=args.save_every, keep_last=args.keep_last,
        seed=args.seed, device=args.device, gradient_checkpointing=args.gradient_checkpointing,
        output_dir=args.output)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="bertkit pretrain", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--data", help="a directory written by `bertkit data create`")
    source.add_argument("--text", nargs="+", help="text files: train a tokenizer and build the data first")
    parser.add_argument("--eval-data", help="held-out data directory (with --data)")
    parser.add_argument("--model", default="tiny", help="tiny, mini, small, medium, base, large, or a config JSON")
    parser.add_argument("-o", "--output", required=True)
    parser.add_argument("--vocab-size", type=int, default=8000, help="with --text")
    parser.add_argument("--max-seq-length", type=int, default=128, help="with --text")
    parser.add_argument("--cased", action="store_true", help="with --text: keep case and accents")
    add_training_arguments(parser)
    args = parser.parse_args(argv)

    from bertkit.tasks.pretraining import pretrain, pretrain_from_text

    training = training_config(args)
    if args.data:
        result = pretrain(args.data, args.output, model=args.model, training=training, eval_data_dir=args.eval_data,
                          resume_from="latest" if args.resume else None)
    else:
        result = pretrain_from_text(args.text, args.output, model=args.model, vocab_size=args.vocab_size,
                                    max_seq_length=args.max_seq_length, do_lower_case=not args.cased,
                                    training=training)
    print(f"model and tokenizer: {result.model_dir}\nmetrics: {result.metrics_path}")
    if result.plot_path:
        print(f"plot: {result.plot_path}")
    if result.evaluation:
        print(json.dumps(result.evaluation, indent=2))
    return 0
