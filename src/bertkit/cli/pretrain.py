"""``bertkit pretrain``: pretrain a BERT on prepared data (``--data``) or straight from text (``--text``).

    bertkit pretrain --text BOOK.txt --model tiny -o OUT           # the size's recipe: tuned defaults
    bertkit pretrain --data DATA_DIR --model small -o OUT [--max-steps N] [--batch-size B] ...
    bertkit pretrain --data wiki:0.7 books:0.3 --model small -o OUT  # mix data directories with weights
    bertkit pretrain --text BOOK.txt --model tiny -o OUT --resume  # continue; reuses the tokenizer and data
    bertkit pretrain --text DOMAIN.txt --init-from CHECKPOINT -o OUT  # continue pretraining a checkpoint
    bertkit pretrain --text BOOK.txt --model small --objective electra -o OUT  # ELECTRA: OUT/model, OUT/generator
    bertkit pretrain --text BOOK.txt --model small --recipe roberta -o OUT     # a RoBERTa, MLM only
    bertkit pretrain --text BOOK.txt --model small --family gte -o OUT         # a GTE of that size, MLM only

Defaults come from the model size's recipe (learning rate, batch, sequence length, masking
rate, steps, vocabulary, NSP on or off: ``bertkit.presets.RECIPES``); with --resume, from the run being
resumed. OUT belongs to one run: a second run into it fails, and a directory holding a run
is only continued (--resume) or replaced (--overwrite, once the new run has a checkpoint).
Under ``torchrun --nproc-per-node N -m bertkit.cli pretrain --data ...`` the run is data-parallel.

--data takes several directories (built with the same tokenizer, --max-seq-length and masking) to train
on them together: ``--data A B`` concatenates them; ``--data wiki:0.7 books:0.3`` draws 70% of every
epoch's instances from wiki and 30% from books (an epoch is as long as both together). A down-weighted
directory shows another part of itself each epoch and repeats nothing before all of it was used; an
up-weighted one repeats whole passes. --resume refuses other directories or weights.

--init-from (instead of --model) continues MLM training of an existing checkpoint on new text
(domain adaptation): an HF/bertkit directory, a Google TF1 checkpoint (directory, bert_model.ckpt
prefix or .zip), a pytorch_pretrained_bert .tar.gz, or a registered name (bert-base-uncased). The
text is tokenized with the checkpoint's own tokenizer (so no --vocab-size / --cased), and --data
must have been built with it. Defaults: the recipe of the checkpoint's hidden size, except a
learning rate of a fifth of the from-scratch one, at most 1e-4 (tiny, mini, small: 1e-4; medium:
6e-5; base, large: 2e-5: large enough to adapt, small enough to keep what the checkpoint knows),
BERT's own masking rate of 15%, sequences of at most the checkpoint's positions, and NSP off
unless --nsp. The held-out [MASK] accuracy is reported before and after training.

--objective electra trains ELECTRA's replaced-token detection instead of masked-LM, in the same loop on the same
batches: the discriminator is an ELECTRA of --model's size (embeddings as wide as its hidden size), the generator
--generator-size as wide (default: the paper's, 1/3 for base, 1/4 for the other sizes), sharing its embeddings;
loss = generator MLM loss + 50 x discriminator loss; masks put [MASK] on 85% of the selected tokens and leave
15% as they are (ELECTRA's, where the data is masked per batch). OUT/model is the discriminator (HF
ElectraForPreTraining, ready for `bertkit finetune ... --model OUT/model`), OUT/generator the generator
(ElectraForMaskedLM), each with the tokenizer. No NSP. --init-from continues an ELECTRA pair: a directory holding
discriminator/ and generator/ (or model/ and generator/: such a run), or a discriminator alone (a new generator
is trained over its embeddings).

--recipe roberta pretrains a RoBERTa (config model_type roberta, of --model's size; RoBERTa's special token ids
are the tokenizer's): masked-LM only, new masks for every batch (statically masked --data is refused), and with
--text every sequence filled to --max-seq-length with contiguous text. It differs from RoBERTa's FULL-SENTENCES
in two ways: a sequence never crosses a document boundary (it ends with its document: DOC-SENTENCES), and the
tokenizer stays BERT's WordPiece ([CLS] A [SEP] B [SEP], one token type). --data directories are used as built
(`bertkit data create` takes half of its B segments from another document). The size's recipe still sets the
hyperparameters (--recipe bert, the default, is today's BERT pretraining).

--family NAME pretrains a model of another family (a key of bertkit.presets.FAMILY_PRESETS: roberta, mpnet,
modernbert, and the newer encoders' names) of --model's size: the family's base config with the size's layers,
width, heads and feed-forward width (what a config JSON sets; the rest stays the family's, e.g. EuroBERT's SwiGLU),
masked-LM only, the tokenizer's special ids. With --recipe roberta it gets RoBERTa's data and masking. The output
loads in HF transformers as that family's masked-LM class.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from bertkit.cli import ArgumentParser, cores, parse_size
from bertkit.cli.training_flags import add_training_flags, check_run_flags, run_options, training_config
from bertkit.io import refuse_output_over_input

#: the training flags a resumed run fills from its own config when they are left unset (device, threads and
#: gradient checkpointing are this machine's, not the run's)
RESUMED_FIELDS = ("max_steps", "epochs", "batch_size", "learning_rate", "warmup_ratio", "weight_decay", "precision",
                  "gradient_accumulation_steps", "log_every", "eval_every", "save_every", "keep_last", "seed",
                  "report_to", "keep_best", "patience")
#: data setting (run.json "text.settings") -> CLI attribute
#: continuing a checkpoint: a fifth of the from-scratch learning rate of its size, at most this
CONTINUE_MAX_LEARNING_RATE = 1e-4
CONTINUE_MASKED_LM_PROB = 0.15  # what the checkpoint was (most likely) trained and is evaluated with

#: said at the start of a --data run without --eval-data (--text holds out a part of the text itself)
NO_HELD_OUT = ("bertkit pretrain: no held-out set is evaluated (no --eval-data), so the run reports training loss "
               "alone; for a held-out [MASK] accuracy pass --eval-data DIR (e.g. written by `bertkit data create ... "
               "--holdout 0.01`)")

TEXT_FLAGS = {"vocab_size": "vocab_size", "max_seq_length": "max_seq_length", "masked_lm_prob": "masked_lm_prob",
              "encoding": "encoding", "format": "format", "next_sentence_prediction": "nsp",
              "text_field": "text_field", "tokenizer_sample_bytes": "tokenizer_sample_bytes"}


def defaults(args: argparse.Namespace) -> dict[str, Any]:
    """Values for flags the user left unset: the resumed run's own, else the model size's recipe."""
    from bertkit.presets import SIZES, recipe_for
    from bertkit.tasks.text_data import TOKENIZER_SAMPLE_BYTES
    from bertkit.training.rundir import holds_run, read_run_info

    stored: dict[str, Any] = {}
    if args.resume and holds_run(args.output):
        info = read_run_info(args.output)
        stored = {k: info["training"][k] for k in RESUMED_FIELDS if k in info.get("training", {})}
        if info.get("task", {}).get("generator_size") is not None:
            stored["generator_size"] = info["task"]["generator_size"]
        settings = info.get("text", {}).get("settings", {})
        stored |= {attr: settings[k] for k, attr in TEXT_FLAGS.items() if k in settings}
        if "next_sentence_prediction" in info.get("data", {}):
            stored.setdefault("nsp", info["data"]["next_sentence_prediction"])
        if "do_lower_case" in settings:
            stored["cased"] = not settings["do_lower_case"]
    if args.init_from:
        from bertkit.tasks.pretraining import electra_checkpoints
        from bertkit.tasks.sources import source_config

        config = source_config(electra_checkpoints(args.init_from)[0] if args.objective == "electra"
                               else args.init_from)
        recipe = recipe_for(config.hidden_size)
    elif args.model in SIZES:
        recipe = recipe_for(args.model)
    else:
        from bertkit.config import BERTConfig

        recipe = recipe_for(BERTConfig.from_json_file(args.model).hidden_size)
    base = dict(max_steps=recipe.max_steps, batch_size=recipe.batch_size, learning_rate=recipe.learning_rate,
                warmup_ratio=recipe.warmup_ratio, weight_decay=0.01, precision="auto", gradient_accumulation_steps=1,
                log_every=25, eval_every=None, save_every=None, keep_last=2, seed=42, report_to=(),
                vocab_size=recipe.vocab_size,
                max_seq_length=recipe.max_seq_length, masked_lm_prob=recipe.masked_lm_prob, encoding="utf-8",
                format="auto", cased=False, text_field="text", tokenizer_sample_bytes=TOKENIZER_SAMPLE_BYTES,
                nsp=recipe.next_sentence_prediction and args.objective == "mlm" and args.recipe == "bert"
                and not getattr(args, "family", None))
    if args.init_from:  # the checkpoint's tokenizer decides vocabulary and case
        base |= dict(learning_rate=min(recipe.learning_rate / 5, CONTINUE_MAX_LEARNING_RATE), vocab_size=None,
                     cased=None, masked_lm_prob=CONTINUE_MASKED_LM_PROB, nsp=False,
                     max_seq_length=min(recipe.max_seq_length, config.max_position_embeddings))
    if getattr(args, "epochs", None) is not None:  # --epochs says how long: no steps from the recipe or the run
        base.pop("max_steps")
        stored.pop("max_steps", None)
    return base | stored


def resolve_objective(args: argparse.Namespace) -> None:
    """--objective and --recipe left unset: the resumed run's, else mlm and bert."""
    from bertkit.training.rundir import holds_run, read_run_info

    task = read_run_info(args.output).get("task", {}) if args.resume and holds_run(args.output) else {}
    args.objective = args.objective or task.get("objective", "mlm")
    args.recipe = args.recipe or task.get("recipe", "bert")
    args.family = args.family or task.get("family")


def fill_defaults(args: argparse.Namespace) -> argparse.Namespace:
    for name, value in defaults(args).items():
        if getattr(args, name, None) is None:
            setattr(args, name, value)
    return args


def main(argv: list[str]) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    resolve(parser, args)
    from bertkit.tasks.pretraining import pretrain, pretrain_from_text
    from bertkit.tasks.text_data import TextOptions

    common = dict(model=None if args.init_from else args.model, init_from=args.init_from,
                  training=training_config(args, output_dir=args.output), **run_options(args),
                  next_sentence_prediction=args.nsp, objective=args.objective, recipe=args.recipe,
                  generator_size=args.generator_size, family=args.family)
    if args.data:
        if args.eval_data is None:
            print(NO_HELD_OUT, file=sys.stderr)
        result = pretrain(args.data, args.output, eval_data_dir=args.eval_data, **common)
    else:
        text = TextOptions(vocab_size=args.vocab_size, do_lower_case=None if args.init_from else not args.cased,
                           max_seq_length=args.max_seq_length, masked_lm_prob=args.masked_lm_prob,
                           encoding=args.encoding, format=args.format, text_field=args.text_field,
                           tokenizer_sample_bytes=args.tokenizer_sample_bytes, workers=args.workers or cores())
        result = pretrain_from_text(args.text, args.output, text=text, **common)
    report(result)
    return 0


def build_parser() -> ArgumentParser:
    """``bertkit pretrain``'s parser: the data, the model, what to pretrain, the training flags."""
    parser = ArgumentParser(prog="bertkit pretrain", description=__doc__,
                            formatter_class=argparse.RawDescriptionHelpFormatter)
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--data", nargs="+", metavar="DIR[:WEIGHT]",
                        help="one or more directories written by `bertkit data create`, e.g. --data wiki:0.7 "
                             "books:0.3 (weights: the share of each; none: each by its size)")
    source.add_argument("--text", nargs="+", help="text (.txt, a paragraph or sentence per line), .jsonl, .parquet: "
                                                  "files, directories or globs, possibly .gz/.bz2/.xz/.zst: train a "
                                                  "tokenizer (with --init-from: use the checkpoint's) and build the "
                                                  "data first")
    parser.add_argument("--eval-data", help="held-out data directory (with --data)")
    parser.add_argument("--model", help="train from scratch: tiny (default), mini, small, medium, base, large, "
                                        "or a config JSON")
    parser.add_argument("--init-from", metavar="SRC",
                        help="continue pretraining this checkpoint instead of --model (see above); with --resume "
                             "it defaults to the run's own")
    parser.add_argument("-o", "--output", required=True)
    text = parser.add_argument_group("with --text")
    text.add_argument("--vocab-size", type=int, help="of the WordPiece vocabulary learnt from the text "
                                                     "(not with --init-from)")
    text.add_argument("--max-seq-length", type=int, help="tokens per training sequence")
    text.add_argument("--masked-lm-prob", type=float, help="share of tokens selected for prediction in training")
    text.add_argument("--encoding", help="of the text files (default utf-8), e.g. latin-1, cp1252")
    text.add_argument("--format", choices=("auto", "google", "prose", "paragraphs"),
                      help="layout of the text files (default: detected per file)")
    text.add_argument("--text-field", help="the field / column of .jsonl, .parquet and Arrow inputs that holds the "
                                           "text (default: text)")
    text.add_argument("--workers", type=int, help="processes building the data of a corpus over 64 MB (default: "
                                                  "every core)")
    text.add_argument("--tokenizer-sample-bytes", type=parse_size, metavar="SIZE",
                      help="text a vocabulary is learnt from, for a corpus over 64 MB, e.g. 256M (the default), 1G")
    text.add_argument("--cased", action="store_true", default=None,
                      help="keep case and accents (not with --init-from)")
    parser.add_argument("--nsp", action=argparse.BooleanOptionalAction,
                        help="train next-sentence prediction beside MLM (default: the size's recipe, tiny: off; "
                             "with --init-from, --objective electra or --recipe roberta: off)")
    how = parser.add_argument_group("what to pretrain (see above; with --resume: the run's own)")
    how.add_argument("--objective", choices=("mlm", "electra"),
                     help="mlm (default): masked-LM (+ NSP with --nsp); electra: replaced-token detection with a "
                          "generator (OUT/model: the discriminator, OUT/generator: the generator)")
    how.add_argument("--generator-size", type=float, metavar="RATIO",
                     help="with --objective electra: the generator's width over the discriminator's (default: 1/3 "
                          "for base, 0.25 for the other sizes, as in the ELECTRA paper)")
    how.add_argument("--recipe", choices=("bert", "roberta"),
                     help="bert (default): BERT as the size's recipe says; roberta: a RoBERTa, MLM only, masks drawn "
                          "per batch, full-length sequences (hyperparameters: still the size's recipe)")
    how.add_argument("--family", help="pretrain a model of this family of --model's size, masked-LM only (see above): "
                                      "e.g. modernbert, gte, eurobert (default: BERT; with --recipe roberta, RoBERTa)")
    add_training_flags(parser, {"device": "auto", "threads": "auto"},
                       extra=("--log-every", "--save-every", "--keep-last", "--gradient-checkpointing"),
                       title="training (defaults: the size's recipe, or the resumed run's values)", helps={
                           "--epochs": "(default: the recipe's --max-steps)",
                           "--eval-every": "on the held-out set (default: only at the end)",
                           "--keep-best": "on the held-out set, e.g. loss or mlm_accuracy (default: the last model)",
                           "--save-every": "(default: only at the end)", "--keep-last": "(default 2)",
                           "--log-every": "(default 25)"})
    return parser


def resolve(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Check the flags (a usage error for those that do not go together) and fill the ones left unset: the
    resumed run's values, else the size's recipe (:func:`defaults`)."""
    data = None
    if args.data:
        from bertkit.data.mixture import parse_data_specs

        data = [spec.path for spec in parse_data_specs(args.data)]
    refuse_output_over_input(("-o", args.output), [("--data", data), ("--text", args.text),
                                                   ("--eval-data", args.eval_data), ("--model", args.model)],
                             models=[("--init-from", args.init_from)])
    check_run_flags(parser, args)
    resolve_objective(args)
    from bertkit.presets import SIZES

    if args.model and args.init_from:
        parser.error(f"--model {args.model} and --init-from {args.init_from} are alternatives: --model trains a "
                     "size from scratch, --init-from continues a checkpoint (of its own size); pass one")
    if args.resume and not (args.model or args.init_from):
        args.init_from = _resumed_source(args.output)
    if args.init_from:
        for flag, value in (("--vocab-size", args.vocab_size), ("--cased", args.cased)):
            if value is not None:
                parser.error(f"{flag} applies to a tokenizer trained from the text; with --init-from the text is "
                             f"tokenized with {args.init_from}'s own tokenizer: leave {flag} out")
    else:
        args.model = args.model or "tiny"
        if args.model not in SIZES and not Path(args.model).is_file():
            parser.error(f"--model must be a size (tiny, mini, small, medium, base, large) or a config JSON file, "
                         f"got {args.model!r}")
    from bertkit.tasks.pretraining import pretraining_setup

    try:  # the combinations of --objective, --recipe, --nsp, --init-from, --generator-size
        pretraining_setup(args.objective, args.recipe, args.nsp, args.init_from, args.generator_size, args.family)
    except ValueError as error:
        parser.error(str(error))
    fill_defaults(args)


def report(result) -> None:
    """Print where the run's files are and its held-out scores."""
    print(f"model and tokenizer: {result.model_dir}\nmetrics: {result.metrics_path}")
    if result.generator_dir:
        print(f"generator (ELECTRA): {result.generator_dir}")
    if result.plot_path:
        print(f"plot: {result.plot_path}")
    if result.evaluation:
        print(json.dumps(result.evaluation, indent=2))
        print(summary(result.evaluation))


def _resumed_source(output: str) -> str | None:
    """The checkpoint the run in ``output`` continues (None for a run from scratch, or no run)."""
    from bertkit.training.rundir import holds_run, read_run_info

    return read_run_info(output).get("init_from", {}).get("source") if holds_run(output) else None


def summary(evaluation: dict[str, Any]) -> str:
    """``held-out [MASK] accuracy: 12.3% before -> 18.9% after (unigram 6.7%)`` (and NSP's, when scored)."""
    def percent(value: float) -> str:
        return f"{100 * value:.1f}%"

    before = evaluation.get("before")
    lines = []
    electra = "discriminator_accuracy" in evaluation
    for name, key, baseline, label in (
            ("generator's [MASK]" if electra else "[MASK]", "mlm_accuracy_masked", "unigram_accuracy_masked",
             "unigram"),
            ("NSP", "nsp_accuracy", "nsp_chance", "chance"),
            ("replaced-token detection", "discriminator_accuracy", "all_original_accuracy", "all original")):
        if key not in evaluation:
            continue
        scores = (f"{percent(before[key])} before -> {percent(evaluation[key])} after" if before
                  else percent(evaluation[key]))
        lines.append(f"held-out {name} accuracy: {scores} ({label} {percent(evaluation[baseline])})")
    return "\n".join(lines)
