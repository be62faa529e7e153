"""``bertkit finetune embed``: fine-tune a bi-encoder (an embedding model) on pairs, triplets or scored pairs.

    bertkit finetune embed --model SRC --train pairs.jsonl [more files] -o OUT --loss mnrl
    bertkit finetune embed --model SRC --train sts.csv -o OUT --loss cosent --matryoshka-dims 256,64
    bertkit finetune embed --static-from TOKENIZER --dim 1024 --train pairs.jsonl -o OUT

A static model (a Model2Vec or sentence-transformers StaticEmbedding directory as --model, or a new table over
a tokenizer's vocabulary: --static-from TOKENIZER --dim D) trains its token table with the recipe
sentence-transformers published for static-retrieval-mrl-en-v1 unless flags say otherwise: batch 2048, learning
rate 0.2, 10 % warmup, weight decay 0, 1 epoch, mnrl inside Matryoshka at the table's dimension and
1024,768,512,256,128,64,32 below it; OUT/model loads in bertkit, sentence-transformers and model2vec.

SRC: a sentence-transformers directory or any BERT checkpoint bertkit loads (mean pooling unless --pooling).
Training files: JSON lines, CSV/TSV, Parquet, Arrow or a datasets.save_to_disk directory; columns by name
(anchor/query, positive, negative_1.., label/score) or by position, or named with --columns q=anchor,d=positive.
OUT gets model/ (a sentence-transformers directory with the prompts and a model card), results.json,
metrics.jsonl and metrics.png. A run owns OUT: --resume continues it exactly, --overwrite replaces it.
--eval-beir DIR / --eval-sts FILE score the model at step 0, every --eval-every steps (default: every epoch) and
at the end, as `bertkit evaluate --beir / --sts` does: eval records of metrics.jsonl and the plot, the final
scores in results.json, a before/after table in the model card; training is the same as without them.
--keep-best METRIC (e.g. ndcg@10) keeps the model of the best evaluation, --patience N stops after N evaluations
without a better one. --batch-size counts the rows of one optimizer step over all processes, as in every
training command.
See :func:`bertkit.sentence.training.finetune_embeddings`.
"""

from __future__ import annotations

import argparse
import json

from bertkit.cli import ArgumentParser
from bertkit.cli.evaluate import k_list
from bertkit.cli.training_flags import add_training_flags, check_run_flags, run_options, training_config
from bertkit.io import refuse_output_over_input
from bertkit.sentence.evaluation.ir_metrics import DEFAULT_K
from bertkit.sentence.losses import LOSSES


def dims_list(text: str) -> list[int]:
    """``--matryoshka-dims 256,64`` -> ``[256, 64]``."""
    try:
        dims = [int(part) for part in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a list of integers; write e.g. 256,128,64") from None
    if any(d <= 0 for d in dims):
        raise argparse.ArgumentTypeError(f"{text!r}: every dimension must be a positive integer, e.g. 256,128,64")
    return dims


def main(argv: list[str]) -> int:
    from bertkit.sentence.training import EMBEDDING_DEFAULTS

    parser = ArgumentParser(prog="bertkit finetune embed", description=__doc__,
                            formatter_class=argparse.RawDescriptionHelpFormatter)
    add_run_flags(parser, EMBEDDING_DEFAULTS, "e.g. ndcg@10 (--eval-beir), spearman_cosine (--eval-sts)",
                  model_required=False)
    loss = parser.add_argument_group("loss")
    loss.add_argument("--loss", default="mnrl", help=f"one of {', '.join(LOSSES)} (default mnrl)")
    loss.add_argument("--scale", type=float, help="mnrl, cached-mnrl, cosent, angle: similarity scale (default 20); "
                                                  "gist: 1 / temperature (default 100)")
    loss.add_argument("--symmetric", action="store_true", help="mnrl, cached-mnrl: also rank anchors per positive")
    loss.add_argument("--mini-batch-size", type=int, help="cached-mnrl: rows embedded at a time (default 32)")
    loss.add_argument("--guide", metavar="MODEL", help="gist: the embedding model whose similarities drop false "
                                                       "negatives (any tokenizer; frozen, not saved)")
    loss.add_argument("--matryoshka-dims", type=dims_list, help="train the embedding truncated to these too, "
                                                                "e.g. 256,64")
    model = parser.add_argument_group("model")
    model.add_argument("--pooling", choices=("mean", "cls", "max", "lasttoken"), help="default: the model's (mean)")
    model.add_argument("--query-prompt", help="prefixed to the anchors; saved as the model's 'query' prompt")
    model.add_argument("--document-prompt", help="prefixed to positives and negatives; saved as 'document'")
    model.add_argument("--allow-repeated-queries", action="store_true",
                       help="let one query come with two different positives in a batch")
    model.add_argument("--static-from", metavar="TOKENIZER",
                       help="instead of --model: train a new static table over this tokenizer's vocabulary (a "
                            "tokenizer.json or a directory holding one), rows drawn from N(0, 1) with --seed")
    model.add_argument("--dim", type=int, default=1024, help="--static-from: the table's columns (default 1024)")
    add_evaluation_flags(parser, reranker=False)
    args = parser.parse_args(argv)
    check_run_flags(parser, args)

    from bertkit.sentence.training import EmbeddingEvaluation, EmbeddingLoss, finetune_embeddings

    if args.guide:
        refuse_output_over_input(("-o", args.output), [], models=[("--guide", args.guide)])
    source, defaults = model_source(parser, args)
    if defaults is not EMBEDDING_DEFAULTS:
        args = static_recipe_args(parser, argv, args, source)
    refuse_output_over_inputs(args)
    result = finetune_embeddings(
        source, args.train, args.output, run_config(args, defaults),
        loss=EmbeddingLoss(args.loss, scale=args.scale, symmetric=args.symmetric,
                           mini_batch_size=args.mini_batch_size, matryoshka_dims=args.matryoshka_dims,
                           guide=args.guide),
        data=training_files(args, query_prompt=args.query_prompt, document_prompt=args.document_prompt,
                            allow_repeated_queries=args.allow_repeated_queries),
        evaluation=EmbeddingEvaluation(beir=args.eval_beir, sts=args.eval_sts, split=args.eval_split,
                                       k=args.eval_k),
        pooling=args.pooling, callbacks=batch_size_note(args), **run_options(args))
    report(result)
    return 0


def model_source(parser: argparse.ArgumentParser, args: argparse.Namespace) -> tuple[object, dict]:
    """The model to train (``--model``, or the :class:`~bertkit.sentence.static_training.StaticInit` of
    ``--static-from``/``--dim``) and its recipe's defaults."""
    from bertkit.sentence.static_training import STATIC_DEFAULTS, StaticInit, is_static_source
    from bertkit.sentence.training import EMBEDDING_DEFAULTS

    if (args.model is None) == (args.static_from is None):
        parser.error("give the model to train: --model DIR, or --static-from TOKENIZER for a new static table "
                     "(one of the two)")
    source = StaticInit(args.static_from, args.dim) if args.static_from else args.model
    return source, STATIC_DEFAULTS if is_static_source(source) else EMBEDDING_DEFAULTS


def static_recipe_args(parser: argparse.ArgumentParser, argv: list[str], args: argparse.Namespace,
                       source) -> argparse.Namespace:
    """``argv`` read again with the static recipe's values as the defaults of the flags not given: its
    hyperparameters and, with ``--loss mnrl``, its Matryoshka dimensions up to the table's (``--batch-size``
    stays None when not given: the recipe's value then comes through :func:`run_config`)."""
    from bertkit.sentence.static_training import STATIC_DEFAULTS, recipe_dims, static_dimension

    recipe = {key: value for key, value in STATIC_DEFAULTS.items()  # the flags' defaults; the rest: run_config
              if key != "batch_size" and parser.get_default(key) is not None}
    if args.loss == "mnrl":  # the recipe's loss: Matryoshka over MNRL
        recipe["matryoshka_dims"] = recipe_dims(static_dimension(source))
    parser.set_defaults(**recipe)
    return parser.parse_args(argv)


def add_run_flags(parser: argparse.ArgumentParser, defaults: dict, keep_best: str, *,
                  model_required: bool = True) -> None:
    """The flags ``finetune embed`` and ``finetune rerank`` share: model, data, the training flags of every
    command (:mod:`bertkit.cli.training_flags`, with the recipe's ``defaults``; ``keep_best``: example metrics),
    the output directory (``--model`` optional where the command has another way to name it)."""
    parser.add_argument("--model", required=model_required, help="the checkpoint to start from")
    parser.add_argument("--train", required=True, nargs="+", help="training file(s)")
    parser.add_argument("-o", "--output", required=True, help="the run's directory")
    data = parser.add_argument_group("data")
    data.add_argument("--columns", help="COLUMN=ROLE,... e.g. q=anchor,d=positive,n1=negative,s=label")
    data.add_argument("--sampling", choices=("proportional", "round_robin"), default="proportional",
                      help="how batches of several files are mixed (default proportional)")
    data.add_argument("--encoding", default="utf-8", help="of the --train files (default utf-8), e.g. latin-1, "
                                                          "cp1252")
    data.add_argument("--max-seq-length", type=int, help="default: the model's")
    shown = {"precision": "auto", "device": "auto", "threads": "auto", "report_to": (),
             "gradient_accumulation_steps": 1, **defaults, "batch_size": None}  # None: tells whether it was given
    add_training_flags(parser, shown, extra=("--save-every",), helps={
        "--batch-size": f"(as in every training command): the in-batch candidates of a step without "
                        f"accumulation (default: {defaults['batch_size']})",
        "--gradient-accumulation-steps": "(each of --batch-size / K rows); in-batch negatives stay each "
                                         "micro-batch's own: cached-mnrl --mini-batch-size gives the whole batch's "
                                         "negatives in less memory",
        "--save-every": "(default: every epoch)",
        "--eval-every": "(default: every epoch); also at step 0 and at the end",
        "--keep-best": f"({keep_best})"})


def run_config(args: argparse.Namespace, defaults: dict):
    """The run's TrainingConfig from the training flags over the recipe's ``defaults``."""
    from bertkit.training.eval_schedule import check_every

    check_every(args.eval_every)  # named by its flag, before the config names its field
    return training_config(args, **{k: v for k, v in defaults.items() if getattr(args, k, None) is None})


def training_files(args: argparse.Namespace, **bi_encoder: object):
    """The :class:`~bertkit.sentence.training.TrainingFiles` of the data flags (``bi_encoder``: the prompts)."""
    from bertkit.sentence.data_layout import parse_columns
    from bertkit.sentence.training import TrainingFiles

    return TrainingFiles(columns=parse_columns(args.columns) if args.columns else None, sampling=args.sampling,
                         encoding=args.encoding, max_seq_length=args.max_seq_length, **bi_encoder)


def add_evaluation_flags(parser: argparse.ArgumentParser, *, reranker: bool, sts: bool = True) -> None:
    """The flags of evaluation during training that ``finetune embed``, ``rerank`` and ``sparse`` share (--eval-beir,
    --eval-split, --eval-k; --eval-every, --keep-best and --patience are every training command's), with the
    bi-encoder's --eval-sts (unless not ``sts``) or the reranker's --eval-rerank, --eval-first-stage and
    --eval-top-k."""
    group = parser.add_argument_group("evaluation during training")
    if reranker:
        group.add_argument("--eval-rerank", metavar="FILE", help="rows of query, positive(s) and negatives (or "
                                                                 "ranked documents): MRR, NDCG and MAP")
        group.add_argument("--eval-beir", metavar="DIR", help="a BEIR directory (corpus.jsonl, queries.jsonl, "
                                                              "qrels/SPLIT.tsv): --eval-first-stage's top k reranked")
        group.add_argument("--eval-first-stage", metavar="EMBEDDER|RUN_FILE",
                           help="--eval-beir: an embedding model directory or a run file (TREC lines or .json) "
                                "giving each query its candidates, retrieved once before training")
        group.add_argument("--eval-top-k", type=int, default=100, metavar="K",
                           help="--eval-beir: the first stage's documents reranked per query (default 100)")
    else:
        group.add_argument("--eval-beir", metavar="DIR", help="a BEIR directory (corpus.jsonl, queries.jsonl, "
                                                              "qrels/SPLIT.tsv): retrieval metrics")
    if not reranker and sts:
        group.add_argument("--eval-sts", metavar="FILE", help="pairs with gold scores (sentence1, sentence2, "
                                                              "score): similarity correlations")
    group.add_argument("--eval-split", default="test", metavar="SPLIT",
                       help="--eval-beir: qrels/SPLIT.tsv (default test)")
    group.add_argument("--eval-k", type=k_list, default=DEFAULT_K, metavar="K,K,...",
                       help="the cut-offs (default 1,3,5,10,100)")


def refuse_output_over_inputs(args: argparse.Namespace) -> None:
    """Refuse an output directory over one of the run's inputs: the training files, the model, the evaluation
    data."""
    models = [(flag, getattr(args, name)) for flag, name in (("--model", "model"), ("--static-from", "static_from"))
              if getattr(args, name, None) is not None]
    refuse_output_over_input(("-o", args.output), [("--train", path) for path in args.train], models=models)
    given = [(f"--{name.replace('_', '-')}", getattr(args, name)) for name in
             ("eval_beir", "eval_sts", "eval_rerank", "eval_first_stage") if getattr(args, name, None) is not None]
    refuse_output_over_input(("-o", args.output), given)


def batch_size_note(args: argparse.Namespace) -> dict:
    """With --batch-size given: the Trainer callback that says once, as the run starts (after every check, beside
    the line on how the batch splits), what --batch-size counts since its meaning changed; else none."""
    return {"on_train_begin": note_batch_size_meaning} if args.batch_size is not None else {}


def note_batch_size_meaning(trainer) -> None:
    """Say once, on stderr (the first process alone under torchrun), what --batch-size counts."""
    import logging

    if trainer.ctx.is_main:
        logging.getLogger("bertkit").info(
            "note: --batch-size counts the rows of one optimizer step over all processes, as in every training "
            "command (it counted the rows per step and process before: an old --batch-size N is now N x "
            "processes x --gradient-accumulation-steps)")


def report(result) -> None:
    """Print the results and where the run's files are (rank 0 alone under torchrun: it wrote them)."""
    from bertkit.sentence.training import data_parallel

    if data_parallel()[0] != 0:
        return
    print(json.dumps(result.results, indent=2))
    print(f"model: {result.model_dir}\nresults: {result.output_dir / 'results.json'}\nmetrics: {result.metrics_path}")
    if result.plot_path:
        print(f"plot: {result.plot_path}")
