"""The ``bertkit`` command: thin subcommands, each one library call, imported lazily so ``--help`` is instant.

Errors are one line on stderr, ``bertkit: error: ...``: exit status 2 for a usage error
(argparse), 1 for anything that goes wrong while running. ``--debug`` (anywhere on the
command line) or ``BERTKIT_DEBUG=1`` shows the full traceback instead. SIGTERM ends a command as
Ctrl-C (SIGINT) does: an exception, so the temp files of unfinished writes are removed on the way out;
the status is 143 (128 + SIGTERM) with one line, ``bertkit: terminated``.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import re
import signal
import sys
from collections.abc import Iterator

from bertkit.dtypes import DTYPES

#: subcommand -> (module under bertkit.cli, one-line help)
COMMANDS = {
    "demo": ("demo", "pretrain a small BERT on bundled Austen within a time budget (10 min), report vs baselines"),
    "info": ("info", "describe a model size, or a saved checkpoint directory"),
    "pretrain": ("pretrain", "pretrain a BERT from prepared data or raw text"),
    "finetune": ("finetune", "fine-tune a BERT: classify, tag, qa (SQuAD), choice (SWAG), embed (bi-encoder), rerank"),
    "evaluate": ("evaluate", "score a fine-tuned model on a labelled file"),
    "predict": ("predict", "run a pipeline (fill-mask, text-classification, ...) or a fine-tuned model's task"),
    "embed": ("embed", "sentence embeddings of a text file, streamed to .npy or .jsonl; `embed mine`: hard negatives; "
                       "`embed dedup`: near-duplicates of a store"),
    "serve": ("serve", "serve a model over HTTP: embeddings, classify, NER, QA, fill-mask, rerank"),
    "export": ("export", "export a model (backbone, any head, sentence-transformers) to ONNX, verified"),
    "fill-mask": ("fill_mask", "print the top-k predictions for each mask token ([MASK], <mask>) in a text"),
    "convert": ("convert", "convert a checkpoint (HF, pytorch_pretrained_bert, Google TF, ...) to HF or TF"),
    "tokenizer": ("tokenizer", "train a WordPiece vocabulary, or tokenize text"),
    "data": ("data", "create pretraining data: NSP sentence pairs, masking, shards"),
    "sparse-index": ("sparse_index", "a sparse (SPLADE) index of a .jsonl / .parquet corpus: build (resumable), "
                                     "export to Elasticsearch / OpenSearch / Qdrant"),
    "index": ("colbert_index", "a late-interaction (ColBERT) index of a .jsonl / .parquet corpus: build "
                               "(resumable), compress (PLAID), append"),
    "distill": ("distill", "distil an embedding model into a static (Model2Vec-style) token table: `distill static`"),
    "search": ("search", "top-k documents of a sparse or multi-vector (ColBERT) index for queries, with latency"),
}


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in argv or os.environ.get("BERTKIT_DEBUG", "") not in ("", "0")
    argv = [a for a in argv if a != "--debug"]
    _report_to_stderr()
    try:
        with _sigterm_raises(argv):
            return _dispatch(argv)
    except Terminated:
        print("bertkit: terminated", file=sys.stderr)
        return 128 + signal.SIGTERM
    except KeyboardInterrupt:
        print("bertkit: interrupted", file=sys.stderr)
        return 130
    except Exception as error:
        if debug:
            raise
        print(f"bertkit: error: {one_line(error)}", file=sys.stderr)
        return 1


class Terminated(KeyboardInterrupt):
    """Raised by SIGTERM in a running command: a KeyboardInterrupt, so whatever cleans up after Ctrl-C (the
    ``finally`` blocks and context managers of atomic writes, a training loop's interrupt handling) runs too."""


#: commands that handle SIGTERM themselves (serve: uvicorn shuts down gracefully, then re-raises the signal)
OWN_SIGTERM = {"serve"}


@contextlib.contextmanager
def _sigterm_raises(argv: list[str]) -> Iterator[None]:
    """While the command runs, SIGTERM raises :class:`Terminated` in the main thread; the previous handler is
    restored after. A no-op off the main thread (only it can set handlers) and for :data:`OWN_SIGTERM`."""
    if (argv and argv[0] in OWN_SIGTERM) or not _in_main_thread():
        yield
        return

    def terminate(signum, frame) -> None:
        raise Terminated()

    previous = signal.signal(signal.SIGTERM, terminate)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _in_main_thread() -> bool:
    import threading

    return threading.current_thread() is threading.main_thread()


def cores() -> int:
    """The cores this process may run on (its affinity: ``taskset`` and cgroups count)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1




def add_dtype_argument(parser, old_precision: bool = False) -> None:
    """``--dtype`` of the inference commands (embed, predict, evaluate, fill-mask, serve, embed mine); the choice
    and why is said in one ``bertkit: dtype ...`` line on stderr. ``old_precision``: ``--precision`` too, the name
    evaluate and predict MODEL_DIR --data once had for it (hidden; said to be the old name when used)."""
    parser.add_argument("--dtype", choices=DTYPES, default="auto",
                        help="number format of the prepared model, as serve and the pipelines prepare theirs: auto "
                             "(default) picks bf16 where the hardware computes it natively and the task's measured "
                             "quality allows (the quality table of docs/concepts/fast-path-and-precision.md), fp32 "
                             "elsewhere; fp32 gives the exact reference numbers; int8: dense layers quantized (CPU; "
                             "its measured quality is said when chosen)")
    if old_precision:
        parser.add_argument("--precision", action=_OldPrecision, dest="dtype", help=argparse.SUPPRESS)


def add_flags(group, rows) -> None:
    """Adds each ``(flag, argparse keywords)`` row of a command's flag table to ``group`` (a parser or an
    argument group): the commands keep their flags as data, one table a group."""
    for flag, kwargs in rows:
        group.add_argument(flag, **kwargs)


class _OldPrecision(argparse.Action):
    """``--precision X`` of an inference command: says once it is the old name of ``--dtype``, and sets it."""

    def __call__(self, parser, namespace, values, option_string=None) -> None:
        if values not in DTYPES:
            parser.error(f"--precision {values}: --precision is the old name of --dtype on this command; use "
                         f"--dtype with one of {', '.join(DTYPES)}")
        print(f"bertkit: warning: --precision is the old name of --dtype on this command (the number format of the "
              f"prepared model, as serve's; --precision now belongs to the training commands): use --dtype {values}",
              file=sys.stderr)
        setattr(namespace, self.dest, values)


def parse_size(value: str) -> int:
    """``"256M"``, ``"1G"``, ``"512k"``, ``"1000000"`` -> bytes (binary multiples); ArgumentTypeError otherwise."""
    units = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}
    text = value.strip().lower().removesuffix("b").removesuffix("i")
    number, unit = (text[:-1], text[-1]) if text and text[-1] in units else (text, "")
    try:
        size = int(float(number) * units[unit])
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a size: write bytes or e.g. 256M, 1G") from None
    if size < 1:
        raise argparse.ArgumentTypeError(f"{value!r}: a size must be at least one byte")
    return size


#: a Sphinx role (``:func:`~bertkit.x.f```): the descriptions are module docstrings, which the docs site reads as reST
ROLE = re.compile(r":(?:py:)?[a-z]+:`([^`]+)`")


def without_roles(text: str, quote: str = "") -> str:
    """``text`` with each Sphinx role as the name it points at, in ``quote``: ``:class:`~bertkit.x.C``` -> ``C``
    (``~`` keeps the last part, as Sphinx shows it), ``:func:`bertkit.f``` -> ``bertkit.f``."""
    def name(match: re.Match) -> str:
        target = match.group(1)
        return quote + (target[1:].rsplit(".", 1)[-1] if target.startswith("~") else target) + quote

    return ROLE.sub(name, text)


class ArgumentParser(argparse.ArgumentParser):
    """argparse with bertkit's one-line usage errors: ``bertkit: error: ... (see PROG --help)``, exit 2, and a
    ``--help`` that shows the names a description's Sphinx roles point at, not the reST markup."""

    def format_help(self) -> str:
        return without_roles(super().format_help())

    def error(self, message: str):
        print(f"bertkit: error: {message} (see {self.prog} --help)", file=sys.stderr)
        raise SystemExit(2)


def _report_to_stderr() -> None:
    """bertkit's log records (INFO and up) and Python warnings as ``bertkit: ...`` lines on stderr."""
    import warnings

    log = logging.getLogger("bertkit")
    if not log.handlers:
        handler = _StderrHandler()
        handler.setFormatter(logging.Formatter("bertkit: %(message)s"))
        log.addHandler(handler)
        log.setLevel(logging.INFO)
        log.propagate = False

    def show(message, category, filename, lineno, file=None, line=None) -> None:
        print(f"bertkit: warning: {message}", file=sys.stderr)

    warnings.showwarning = show


class _StderrHandler(logging.StreamHandler):
    """Writes to whatever ``sys.stderr`` is now (a redirected or captured stream included), not to the one
    it was created with."""

    @property
    def stream(self):
        return sys.stderr

    @stream.setter
    def stream(self, value) -> None:
        pass


def one_line(error: BaseException) -> str:
    """The error's message on one line (its type when it has none, as for a bare ``KeyError``)."""
    text = " ".join(str(error).split())
    if isinstance(error, OSError) and error.strerror:  # "[Errno 28] ..." says nothing to a user: the words do
        text = " ".join(f"{error.filename}: {error.strerror}".split()) if error.filename else \
            " ".join(error.strerror.split())
    if isinstance(error, KeyError | IndexError | AttributeError) or not text:
        text = f"{type(error).__name__}: {text}" if text else type(error).__name__
    return f"{text} (run with --debug for the traceback)" if not isinstance(error, ValueError | OSError) else text


def _dispatch(argv: list[str]) -> int:
    parser = ArgumentParser(prog="bertkit", description="The BERT model family for PyTorch.",
                                     epilog="--debug (or BERTKIT_DEBUG=1) shows tracebacks.")
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
