"""``bertkit finetune sparse``: train a learned-sparse (SPLADE) model, or an inference-free one, from an MLM base.

    bertkit finetune sparse --model MLM --train pairs.jsonl [more files] -o OUT
    bertkit finetune sparse --model MLM --train pairs.jsonl -o OUT --inference-free --eval-beir DIR --keep-best ndcg@10

MLM: a checkpoint with its masked-LM head (BERT, DistilBERT, RoBERTa, ModernBERT, ...), or a SPLADE /
inference-free sentence-transformers directory to train on. The training files are `finetune embed`'s (pairs,
triplets, rows with negatives, scored pairs; named or positional columns, --columns). The loss (--loss, default
mnrl) runs inside the FLOPS (or L1) regularisers of the queries (the anchors) and the documents (positives and
negatives), --query-weight / --document-weight, which warm up from 0 over the first --regulariser-warmup of the
steps. --inference-free: the queries are weighed by a static weight per token (no forward pass at query time),
initialised from the IDF of the training documents and trained at --static-learning-rate. OUT gets model/ (a
sentence-transformers sparse encoder directory that sentence-transformers and bertkit.SparseEncoder load),
results.json, metrics.jsonl (the loss, its parts and the regulariser weights) and metrics.png; --eval-beir scores
the model through a sparse index at step 0, every --eval-every steps and at the end. A run owns OUT: --resume
continues it exactly, --overwrite replaces it. See :func:`bertkit.sentence.sparse_training.finetune_sparse`.
"""

from __future__ import annotations

import argparse

from bertkit.cli import ArgumentParser
from bertkit.cli.finetune_embed import (
    add_evaluation_flags,
    add_run_flags,
    refuse_output_over_inputs,
    report,
    run_config,
    training_files,
)
from bertkit.cli.training_flags import check_run_flags, run_options
from bertkit.sentence.losses import SPARSE_LOSSES
from bertkit.sentence.losses.sparse import REGULARISERS, WARMUP_SHAPES


def main(argv: list[str]) -> int:
    from bertkit.sentence.sparse_training import SPARSE_DEFAULTS

    parser = ArgumentParser(prog="bertkit finetune sparse", description=__doc__,
                            formatter_class=argparse.RawDescriptionHelpFormatter)
    add_run_flags(parser, SPARSE_DEFAULTS, "e.g. ndcg@10 (--eval-beir)")
    loss = parser.add_argument_group("loss")
    loss.add_argument("--loss", default="mnrl", help=f"one of {', '.join(SPARSE_LOSSES)} (default mnrl), inside the "
                                                     "regularisers")
    loss.add_argument("--scale", type=float, help="mnrl: the dot product's scale (default 1); cosent: the cosine's "
                                                  "(default 20)")
    loss.add_argument("--temperature", type=float, help="kl: the softmax temperature (default 2)")
    loss.add_argument("--mini-batch-size", type=int, help="the cached form: rows embedded at a time (the whole "
                                                          "batch's negatives in less memory)")
    loss.add_argument("--query-weight", type=float, help="the query regulariser's weight (default 5e-5; 0 with "
                                                         "--inference-free)")
    loss.add_argument("--document-weight", type=float, default=3e-5, help="the document regulariser's weight "
                                                                          "(default 3e-5)")
    loss.add_argument("--query-regulariser", choices=tuple(REGULARISERS), default="flops",
                      help="FLOPS (sum of squared mean weights) or L1 (default flops)")
    loss.add_argument("--document-regulariser", choices=tuple(REGULARISERS), default="flops",
                      help="(default flops)")
    loss.add_argument("--regulariser-warmup", type=float, default=1 / 3, metavar="RATIO",
                      help="the fraction of the steps over which the regulariser weights grow from 0 (default 1/3; "
                           "0: none)")
    loss.add_argument("--regulariser-warmup-shape", choices=WARMUP_SHAPES, default="quadratic",
                      help="(default quadratic)")
    model = parser.add_argument_group("model")
    model.add_argument("--inference-free", action="store_true",
                       help="a static, IDF-initialised weight per query token (no forward pass for queries)")
    model.add_argument("--static-learning-rate", type=float, default=1e-3,
                       help="--inference-free: the static query weights' learning rate (default 1e-3)")
    model.add_argument("--max-active-dims", type=int, help="keep this many largest weights per vector when "
                                                           "encoding (saved with the model; default all)")
    model.add_argument("--pooling", choices=("max", "sum"), default="max", help="SpladePooling (default max)")
    model.add_argument("--activation", choices=("relu", "log1p_relu"), default="relu",
                       help="SpladePooling: log1p(relu) or a second log1p (default relu)")
    model.add_argument("--query-prompt", help="prefixed to the anchors; saved as the model's 'query' prompt")
    model.add_argument("--document-prompt", help="prefixed to positives and negatives; saved as 'document'")
    model.add_argument("--allow-repeated-queries", action="store_true",
                       help="let one query come with two different positives in a batch")
    add_evaluation_flags(parser, reranker=False, sts=False)
    args = parser.parse_args(argv)
    check_run_flags(parser, args)

    from bertkit.sentence.sparse_training import SparseEvaluation, SparseLoss, SparseModel, finetune_sparse

    refuse_output_over_inputs(args)
    result = finetune_sparse(
        args.model, args.train, args.output, run_config(args, SPARSE_DEFAULTS),
        loss=SparseLoss(args.loss, scale=args.scale, temperature=args.temperature,
                        mini_batch_size=args.mini_batch_size, query_weight=args.query_weight,
                        document_weight=args.document_weight, query_regulariser=args.query_regulariser,
                        document_regulariser=args.document_regulariser, warmup=args.regulariser_warmup,
                        warmup_shape=args.regulariser_warmup_shape),
        sparse=SparseModel(inference_free=args.inference_free, static_learning_rate=args.static_learning_rate,
                           max_active_dims=args.max_active_dims, pooling=args.pooling, activation=args.activation),
        data=training_files(args, query_prompt=args.query_prompt, document_prompt=args.document_prompt,
                            allow_repeated_queries=args.allow_repeated_queries),
        evaluation=SparseEvaluation(beir=args.eval_beir, split=args.eval_split, k=args.eval_k),
        **run_options(args))  # a new command: no note on what --batch-size counted before
    report(result)
    return 0
