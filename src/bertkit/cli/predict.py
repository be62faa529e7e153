"""``bertkit predict``: answers from a pipeline, or a fine-tuned model's predictions on a labelled-format file.

Pipeline form (TASK is fill-mask, embeddings, feature-extraction, text-classification, token-classification,
question-answering, rerank, zero-shot-classification, or an alias such as ner / qa):

    bertkit predict fill-mask bert-base-uncased "Paris is the [MASK] of France."
    bertkit predict ner out/model --input texts.txt -o entities.jsonl --aggregation-strategy simple
    bertkit predict question-answering squad/model --input questions.jsonl    # {"question", "context"} lines
    bertkit predict rerank cross-encoder/ "who wrote emma?" "Emma is a novel by Jane Austen." "Paris."
    bertkit predict zero-shot nli/model "The match ended 2-1." --candidate-labels sport politics --multi-label

TEXTs on the command line or --input FILE (.txt: a text per line; .jsonl: a text or an object per line;
.csv with a header); one JSON line per input ({"input", "output"}) to -o OUT.jsonl or stdout, in input
order, streamed (files larger than memory are fine). Answer i is line i of a .txt / .jsonl FILE: a blank
line is not run, and answered {"input": "", "output": null, "empty": true}. -o must not be (or resolve to)
MODEL or FILE, nor lie inside MODEL.

Fine-tuned form: bertkit predict MODEL_DIR --data FILE -o OUT.jsonl [--task T] — one JSON line per row of a
file in the task's training format (the predicted label as it appears in the data, tags per word for
tagging, the answer text for QA) with its score / probabilities.
"""

from __future__ import annotations

import argparse
import functools
import itertools
import json
import os
import sys
from collections.abc import Iterable, Iterator

from bertkit.cli import ArgumentParser, add_dtype_argument, add_flags
from bertkit.io import refuse_output_over_input

#: call parameters a flag sets: (flag, argparse keyword arguments)
PIPELINE_FLAGS = [
    ("--top-k", {"type": int, "help": "fill-mask: predictions per mask (default 5); text-classification: labels "
                                      "per input (default: the best); question-answering: answers (default 1)"}),
    ("--targets", {"nargs": "+", "help": "fill-mask: candidate tokens"}),
    ("--function-to-apply", {"choices": ("softmax", "sigmoid", "none"),
                             "help": "text-classification: scores from the logits (default: by the model's "
                                     "problem type)"}),
    ("--aggregation-strategy", {"choices": ("none", "simple", "first", "average", "max"),
                                "help": "token-classification: how word pieces join into entities (default none)"}),
    ("--doc-stride", {"type": int, "help": "question-answering: tokens shared by consecutive windows of a long "
                                           "context (default 128, or less to fit)"}),
    ("--max-answer-len", {"type": int, "help": "question-answering: the longest answer in tokens (default 15)"}),
    ("--handle-impossible-answer", {"action": "store_true", "default": None,
                                    "help": "question-answering: an empty answer may win (SQuAD 2.0)"}),
    ("--candidate-labels", {"nargs": "+", "metavar": "LABEL",
                            "help": "zero-shot-classification: the labels (arguments, or comma-separated)"}),
    ("--hypothesis-template", {"help": "zero-shot-classification: the hypothesis with {} for the label (default "
                                      "'This example is {}.')"}),
    ("--multi-label", {"action": "store_true", "default": None,
                       "help": "zero-shot-classification: score each label on its own (entailment vs contradiction)"}),
    ("--entailment-label", {"help": "zero-shot-classification: the model's label of the entailment class (default: "
                                    "the one starting with 'entail')"}),
    ("--normalize", {"action": "store_true", "default": None, "help": "embeddings: L2-normalise"}),
    ("--pooling", {"help": "embeddings: cls, mean, max, ... (default: the model's own, else mean)"}),
]


def is_pipeline_form(argv: list[str]) -> bool:
    from bertkit.pipelines import ALIASES, TASKS

    return bool(argv) and (argv[0] in TASKS or argv[0] in ALIASES) and not os.path.exists(argv[0])


def main(argv: list[str]) -> int:
    if is_pipeline_form(argv):
        return pipeline_main(argv)
    return finetuned_main(argv)


def pipeline_parser() -> ArgumentParser:
    parser = ArgumentParser(prog="bertkit predict", description=__doc__,
                            formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("task", help="the pipeline task")
    parser.add_argument("model", help="anything bertkit loads: a directory, a checkpoint, a registered name")
    parser.add_argument("texts", nargs="*", metavar="TEXT", help="inputs (rerank: the query, then passages)")
    parser.add_argument("--input", help="a .txt, .jsonl or .csv file of inputs")
    parser.add_argument("--encoding", default="utf-8", help="of the --input file (default utf-8), e.g. utf-16, cp1252")
    parser.add_argument("-o", "--output", help="a .jsonl file for the answers (default: stdout)")
    parser.add_argument("--batch-size", type=int, default=32, help="inputs per forward pass (default 32)")
    parser.add_argument("--device", help="cpu (default), cuda, gpu")
    add_dtype_argument(parser)
    add_flags(parser, PIPELINE_FLAGS)
    return parser


def pipeline_main(argv: list[str]) -> int:
    args = pipeline_parser().parse_args(argv)
    refuse_output_over_input(("-o", args.output), [("--input", args.input)], models=[("MODEL", args.model)])
    if bool(args.texts) == bool(args.input):
        raise ValueError("give the inputs either as TEXT arguments or with --input FILE (one of the two).")
    from bertkit.inference.finite import check_value
    from bertkit.pipelines import pipeline, pipeline_class
    from bertkit.pipelines.files import locate_input, read_inputs

    task = pipeline_class(args.task).task
    params = {flag[2:].replace("-", "_"): getattr(args, flag[2:].replace("-", "_")) for flag, _ in PIPELINE_FLAGS}
    params = {k: v for k, v in params.items() if v is not None}
    if "candidate_labels" in params:  # several arguments, or one of comma-separated labels, or both
        params["candidate_labels"] = ",".join(params["candidate_labels"])
    pipe = pipeline(task, model=args.model, device=args.device, batch_size=args.batch_size, dtype=args.dtype)
    if task == "rerank":
        items = ([{"query": args.texts[0], "passages": args.texts[1:]}] if args.texts
                 else read_inputs(args.input, args.encoding, keep_blank=True))
        answers = ((item, None if item == "" else pipe(item["query"], item["passages"], **params)) for item in items)
    else:
        answers = answer_lines(pipe, args.texts if args.texts else read_inputs(args.input, args.encoding,
                                                                               keep_blank=True), params)

    def where(index: int) -> str:
        return locate_input(args.input, index, args.encoding) if args.input else f"the command line's input {index + 1}"

    # a NaN answer stops the write (an -o file is left as it was), naming its input
    checked = (_record(item, check_value(answer, functools.partial(where, i)))
               for i, (item, answer) in enumerate(answers))
    written = write_jsonl(checked, args.output)
    if args.output:
        print(f"{written} answers: {args.output}", file=sys.stderr)
    return 0


def answer_lines(pipe, items: Iterable, params: dict) -> Iterator[tuple]:
    """``(item, answer)`` for each of ``items`` in order, streamed; a blank item (``""``) is not run: its
    answer is None. The blank ones are left out of the pipeline's stream and their places kept here."""
    inputs, stream = itertools.tee(items)  # tee holds at most the chunk being answered
    answers = pipe.stream((item for item in stream if item != ""), **params)
    for item in inputs:
        yield item, None if item == "" else next(answers)


def _record(item, answer) -> dict:
    return {"input": item, "output": answer, "empty": True} if item == "" else {"input": item, "output": answer}


def write_jsonl(records: Iterator[dict], path: str | None) -> int:
    """Write ``records`` as JSON lines to ``path`` (atomically) or stdout; returns how many."""
    if path is None:
        count = 0
        for record in records:
            print(json.dumps(record, ensure_ascii=False))
            count += 1
        return count
    from bertkit.io import atomic_path

    count = 0
    with atomic_path(path) as tmp, open(tmp, "w", encoding="utf-8") as handle:
        for record in records:
            handle.write(json.dumps(record, ensure_ascii=False) + "\n")
            count += 1
    return count


def finetuned_main(argv: list[str]) -> int:
    from bertkit.cli.evaluate import options, parser_for

    parser = parser_for("bertkit predict", __doc__)
    parser.add_argument("-o", "--output", required=True, help="where to write the predictions (JSON lines)")
    args = parser.parse_args(argv)
    refuse_output_over_input(("-o", args.output), [("--data", args.data)], models=[("MODEL_DIR", args.model)])
    from bertkit.tasks.predicting import predict

    predictions = predict(args.model, args.data, args.output, task=args.task, batch_size=args.batch_size,
                          dtype=args.dtype, device=args.device, max_seq_length=args.max_seq_length, **options(args))
    print(f"{len(predictions)} predictions: {args.output}")
    return 0
