"""``bertkit finetune colbert``: train a multi-vector (ColBERT) model, from a plain encoder or a ColBERT.

    bertkit finetune colbert --model ENCODER --train pairs.jsonl [more files] -o OUT
    bertkit finetune colbert --model COLBERT --train triplets.jsonl -o OUT --eval-beir DIR --keep-best ndcg@10
    bertkit finetune colbert --model ENCODER --train scored.jsonl -o OUT --loss kl --temperature 0.5

--model: a ColBERT directory (sentence-transformers 6 MultiVectorEncoder, PyLate, Stanford ColBERT), trained as
it is, or a plain encoder (an HF checkpoint, a sentence-transformers directory, a registry name), which gets a
token projection (--dim, default 128) and sentence-transformers 6's ColBERT defaults (no markers, no query
expansion, no skiplist; --query-expansion, --skiplist punctuation, --query-prompt / --document-prompt,
--query-length / --document-length set them). The training files are `finetune embed`'s (pairs, triplets, rows
with negatives, rows with teacher scores; --columns). The loss (--loss): mnrl (in-batch and hard negatives,
scored by MaxSim, --scale default 1), cached-mnrl (the same with --mini-batch-size rows in memory at a time),
margin-mse and kl (distillation from the teacher scores of each row's positive and negatives). OUT gets model/
(a sentence-transformers 6 MultiVectorEncoder directory that sentence-transformers and bertkit.MultiVectorEncoder
load), results.json, metrics.jsonl and metrics.png; --eval-beir scores the model by exact MaxSim over the corpus
at step 0, every --eval-every steps and at the end. A run owns OUT: --resume continues it exactly, --overwrite
replaces it. See :func:`bertkit.sentence.multi_vector_training.finetune_colbert`.
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
from bertkit.sentence.losses import MULTI_VECTOR_LOSSES
from bertkit.sentence.multi_vector_build import SKIPLISTS


def main(argv: list[str]) -> int:
    from bertkit.sentence.multi_vector_training import COLBERT_DEFAULTS

    parser = ArgumentParser(prog="bertkit finetune colbert", description=__doc__,
                            formatter_class=argparse.RawDescriptionHelpFormatter)
    add_run_flags(parser, COLBERT_DEFAULTS, "e.g. ndcg@10 (--eval-beir)")
    loss = parser.add_argument_group("loss")
    loss.add_argument("--loss", default="mnrl", help=f"one of {', '.join(MULTI_VECTOR_LOSSES)} (default mnrl)")
    loss.add_argument("--scale", type=float, help="mnrl, cached-mnrl: the MaxSim scores' scale, 1 / temperature "
                                                  "(default 1)")
    loss.add_argument("--mini-batch-size", type=int, help="cached-mnrl: rows embedded at a time (default 32)")
    loss.add_argument("--temperature", type=float, help="kl: the softmax temperature of both sides (default 1)")
    loss.add_argument("--student-temperature", type=float, help="kl: the student's own (default --temperature)")
    loss.add_argument("--teacher-temperature", type=float, help="kl: the teacher's own (default --temperature)")
    model = parser.add_argument_group("a new ColBERT (from a plain encoder)")
    model.add_argument("--dim", type=int, help="the token vectors' size: the projection's outputs (default 128)")
    model.add_argument("--query-length", type=int, help="query tokens (default: the base's sequence length)")
    model.add_argument("--document-length", type=int, help="document tokens (default: the base's sequence length)")
    model.add_argument("--query-expansion", type=int, metavar="LENGTH",
                       help="pad each query with [MASK] to LENGTH tokens, scored, not attended (ColBERT's query "
                            "augmentation; default off)")
    model.add_argument("--skiplist", choices=tuple(SKIPLISTS), default="none",
                       help="document tokens never scored (default none; punctuation: PyLate's and ColBERT's)")
    model.add_argument("--similarity", choices=("maxsim", "meanmaxsim"), default="maxsim",
                       help="the saved scoring (default maxsim)")
    prompts = parser.add_argument_group("prompts")
    prompts.add_argument("--query-prompt", help="prefixed to the queries; saved as the model's 'query' prompt")
    prompts.add_argument("--document-prompt", help="prefixed to the documents; saved as 'document'")
    prompts.add_argument("--allow-repeated-queries", action="store_true",
                         help="let one query come with two different positives in a batch")
    add_evaluation_flags(parser, reranker=False, sts=False)
    args = parser.parse_args(argv)
    check_run_flags(parser, args)

    from bertkit.sentence.multi_vector_build import ColBERTSettings
    from bertkit.sentence.multi_vector_training import MultiVectorEvaluation, MultiVectorLoss, finetune_colbert

    refuse_output_over_inputs(args)
    result = finetune_colbert(
        args.model, args.train, args.output, run_config(args, COLBERT_DEFAULTS),
        loss=MultiVectorLoss(args.loss, scale=args.scale, mini_batch_size=args.mini_batch_size,
                             temperature=args.temperature, student_temperature=args.student_temperature,
                             teacher_temperature=args.teacher_temperature),
        colbert=ColBERTSettings(dim=args.dim, query_length=args.query_length, document_length=args.document_length,
                                query_expansion=args.query_expansion, skiplist=args.skiplist,
                                similarity=args.similarity),
        data=training_files(args, query_prompt=args.query_prompt, document_prompt=args.document_prompt,
                            allow_repeated_queries=args.allow_repeated_queries),
        evaluation=MultiVectorEvaluation(beir=args.eval_beir, split=args.eval_split, k=args.eval_k),
        **run_options(args))
    report(result)
    return 0
