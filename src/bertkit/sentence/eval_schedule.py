"""Evaluation during training of the embedding and reranker runs: the checks of what they evaluate on and the
model card's table.

The schedule itself (step 0, every N steps, the last step; the random state and every module's mode put back;
the best model and early stopping) is the one of every run, :class:`bertkit.training.eval_schedule.EvalSchedule`
(re-exported here with :func:`json_metrics` and :func:`check_every`, their former place).
:func:`evaluation_table` renders the history as a model card's markdown table.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from bertkit.training.eval_schedule import EvalSchedule, check_every, json_metrics

__all__ = ["EvalSchedule", "check_beir_directory", "check_every", "check_needed", "evaluation_table", "json_metrics"]

#: a model card shows every evaluation up to this many, else the first and the last
CARD_COLUMNS = 6


def check_needed(every: int | None, described: Mapping[str, str], flags: str) -> None:
    """``ValueError`` naming ``--eval-every`` when it is set but nothing is evaluated on (``described`` is empty);
    ``flags``: what to add, for the message."""
    if every is not None and not described:
        raise ValueError(f"--eval-every needs something to evaluate on: add {flags}.")


def check_beir_directory(directory, split: str, flag: str = "--eval-beir") -> None:
    """A one-line ``ValueError`` naming ``flag`` unless ``directory`` is a directory (its content is checked as it
    is read: :func:`~bertkit.sentence.evaluation.beir.load_beir`)."""
    from pathlib import Path

    if not Path(directory).is_dir():
        raise ValueError(f"{flag} {directory}: not a directory; give a BEIR directory holding corpus.jsonl, "
                         f"queries.jsonl and qrels/{split}.tsv.")


def evaluation_table(history: Sequence[Mapping[str, Any]], max_columns: int = CARD_COLUMNS) -> list[str]:
    """Markdown lines of a table, one row per metric and one column per evaluation of ``history`` (all of them up
    to ``max_columns``, else the first and the last); the step-0 column is headed "base". ``[]`` when empty."""
    if not history:
        return []
    shown = list(history) if len(history) <= max_columns else [history[0], history[-1]]
    heads = ["base (step 0)" if h["step"] == 0 else f"step {h['step']}" for h in shown]
    names = list(dict.fromkeys(name for h in shown for name in h["metrics"]))
    lines = ["| metric | " + " | ".join(heads) + " |", "|:--|" + "--:|" * len(shown)]
    for name in names:
        cells = [_cell(h["metrics"].get(name)) for h in shown]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return lines


def _cell(value: float | None) -> str:
    return "" if value is None else "n/a" if not math.isfinite(value) else f"{value:.4f}"
