"""The ``bertkit`` command: thin subcommands, each one library call, imported lazily so ``--help`` is instant."""

from __future__ import annotations

import argparse
import sys

#: subcommand -> (module under bertkit.cli, one-line help)
COMMANDS = {
    "demo": ("demo", "show the model family and run a forward pass"),
    "info": ("info", "describe a model size, or a saved checkpoint directory"),
    "pretrain": ("pretrain", "pretrain a BERT from prepared data or raw text"),
    "fill-mask": ("fill_mask", "print the top-k predictions for each [MASK] in a text"),
    "convert": ("convert", "convert a checkpoint (HF, pytorch_pretrained_bert, Google TF, ...) to HF or TF"),
    "tokenizer": ("tokenizer", "train a WordPiece vocabulary, or tokenize text"),
    "data": ("data", "create pretraining data: NSP sentence pairs, masking, shards"),
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bertkit", description="The BERT model family for PyTorch.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (_, help_text) in COMMANDS.items():
        sub.add_parser(name, help=help_text, add_help=False)
    args, rest = parser.parse_known_args(argv)
    if args.command is None:
        parser.print_help()
        return 0
    import importlib

    module = importlib.import_module(f"bertkit.cli.{COMMANDS[args.command][0]}")
    return module.main(rest) or 0


if __name__ == "__main__":
    sys.exit(main())
