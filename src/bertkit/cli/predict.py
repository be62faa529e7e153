"""``bertkit predict MODEL_DIR --data FILE -o OUT.jsonl [--task T]``: a fine-tuned model's predictions.

One JSON line per input row, in input order: the predicted ``label`` as it appears in the data
(``tags`` per word for tagging, the answer text for QA) with its score / probabilities.
"""

from __future__ import annotations

from bertkit.cli.evaluate import options, parser_for


def main(argv: list[str]) -> int:
    parser = parser_for("bertkit predict", __doc__)
    parser.add_argument("-o", "--output", required=True, help="where to write the predictions (JSON lines)")
    args = parser.parse_args(argv)
    from bertkit.tasks.finetuning import predict

    predictions = predict(args.model, args.data, args.output, task=args.task, batch_size=args.batch_size,
                          max_seq_length=args.max_seq_length, precision=args.precision, **options(args))
    print(f"{len(predictions)} predictions: {args.output}")
    return 0
