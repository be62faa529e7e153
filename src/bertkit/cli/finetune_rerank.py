"""``bertkit finetune rerank``: fine-tune a cross-encoder (a reranker) on labelled pairs or on triplets.

    bertkit finetune rerank --model SRC --train pairs.jsonl -o OUT --loss bce       (query, passage, label)
    bertkit finetune rerank --model SRC --train triplets.jsonl -o OUT --loss mnrl   (query, positive, negatives)

SRC: a cross-encoder directory or any BERT checkpoint bertkit loads (a new one-label head, seeded by --seed).
(query, positive, negatives...) rows are labelled 1, 0, 0, ... for bce, listnet and lambda. OUT gets model/
(sentence-transformers' CrossEncoder loads it with the same scores; `bertkit serve` serves it on /rerank),
results.json, metrics.jsonl and metrics.png. --resume continues a run exactly, --overwrite replaces it.
--eval-rerank FILE (rows, as `bertkit evaluate --rerank`) and/or --eval-beir DIR --eval-first-stage
EMBEDDER|RUN_FILE [--eval-top-k 100] (as `--beir --first-stage`) score the reranker being trained at step 0,
every --eval-every steps (default: every epoch) and at the end: eval records of metrics.jsonl and the plot, the
final scores in results.json, a before/after table in the model card; training is the same as without them.
--keep-best METRIC (e.g. ndcg@10) keeps the model of the best evaluation, --patience N stops after N evaluations
without a better one. --batch-size counts the rows of one optimizer step over all processes, as in every
training command. See :func:`bertkit.sentence.rerank_training.finetune_reranker`.
"""

from __future__ import annotations

import argparse

from bertkit.cli import ArgumentParser
from bertkit.cli.finetune_embed import (
    add_evaluation_flags,
    add_run_flags,
    batch_size_note,
    refuse_output_over_inputs,
    report,
    run_config,
    training_files,
)
from bertkit.cli.training_flags import check_run_flags, run_options
from bertkit.sentence.losses import RERANK_LOSSES


def main(argv: list[str]) -> int:
    from bertkit.sentence.rerank_training import RERANK_DEFAULTS

    parser = ArgumentParser(prog="bertkit finetune rerank", description=__doc__,
                            formatter_class=argparse.RawDescriptionHelpFormatter)
    add_run_flags(parser, RERANK_DEFAULTS, "e.g. ndcg@10, mrr@10 (with --eval-rerank and --eval-beir: rerank_ndcg@10, "
                                           "beir_ndcg@10)")
    loss = parser.add_argument_group("loss")
    loss.add_argument("--loss", default="bce", help=f"one of {', '.join(RERANK_LOSSES)} (default bce)")
    loss.add_argument("--mini-batch-size", type=int, help="pairs scored at a time (default: all of a batch)")
    loss.add_argument("--num-negatives", type=int, help="mnrl: other rows' passages per row (default 4)")
    add_evaluation_flags(parser, reranker=True)
    args = parser.parse_args(argv)
    check_run_flags(parser, args)

    from bertkit.sentence.rerank_training import RerankEvaluation, RerankLoss, finetune_reranker

    refuse_output_over_inputs(args)
    result = finetune_reranker(
        args.model, args.train, args.output, run_config(args, RERANK_DEFAULTS),
        loss=RerankLoss(args.loss, mini_batch_size=args.mini_batch_size, num_negatives=args.num_negatives),
        data=training_files(args),
        evaluation=RerankEvaluation(rerank=args.eval_rerank, beir=args.eval_beir, first_stage=args.eval_first_stage,
                                    top_k=args.eval_top_k, split=args.eval_split, k=args.eval_k),
        callbacks=batch_size_note(args), **run_options(args))
    report(result)
    return 0
