"""Metrics: example-weighted averaging over ranks, the metrics.jsonl file, and a PNG plot of it.

Every line of ``metrics.jsonl`` is one JSON object with ``split`` ("train" or "eval"),
``step`` and ``epoch``; train lines add ``lr``, ``loss``, the model's metrics,
``grad_norm``, ``tokens_per_s``, ``examples_per_s``, ``elapsed_s`` and
``nonfinite_steps``; eval lines add ``loss``, the metrics and ``examples``. A metric with
nothing to average (e.g. accuracy over no labelled token) is ``null``.
"""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import Mapping
from pathlib import Path

import torch

from bertkit.io import atomic_write_text
from bertkit.training.distributed import DistributedContext, all_reduce_


class MetricWindow:
    """Weighted sums of scalar metrics since the last reset (non-finite values skipped), plus counts."""

    def __init__(self):
        self.reset()

    def reset(self) -> None:
        self.sums: dict[str, torch.Tensor] = {}
        self.weights: dict[str, torch.Tensor] = {}
        self.examples, self.tokens, self.steps, self.seconds = 0, 0, 0, 0.0

    def add(self, metrics: Mapping[str, torch.Tensor], weight: int) -> None:
        for name, value in metrics.items():
            value = value.detach().float().reshape(())
            finite = torch.isfinite(value)
            self.sums[name] = self.sums.get(name, 0) + torch.where(finite, value * weight, 0.0)
            self.weights[name] = self.weights.get(name, 0) + finite * weight

    def count(self, examples: int, tokens: torch.Tensor | int) -> None:
        self.examples += examples
        self.tokens = self.tokens + tokens

    def reduce(self, ctx: DistributedContext) -> tuple[dict[str, float | None], int, float]:
        """``(means, examples, tokens)`` summed over ranks (one collective); a mean with no weight is None."""
        names = sorted(self.sums)
        device = next(iter(self.sums.values())).device if names else torch.device("cpu")
        parts = [*(self.sums[n] for n in names), *(self.weights[n].float() for n in names),
                 torch.as_tensor(self.tokens, device=device).float(), torch.tensor(float(self.examples))]
        flat = all_reduce_(torch.stack([p.to(device) for p in parts]), ctx).tolist()
        k = len(names)
        means = {n: (flat[i] / flat[k + i] if flat[k + i] > 0 else None) for i, n in enumerate(names)}
        return means, int(flat[-1]), flat[-2]


def read_metrics(path: str | Path) -> list[dict]:
    """metrics.jsonl's records in order (``[]`` when there is no file); a torn line (a crash mid-write) is
    left out."""
    path = Path(path)
    if not path.exists():
        return []
    records = []
    for line in path.read_text(encoding="utf-8").splitlines():
        with contextlib.suppress(json.JSONDecodeError):
            records.append(json.loads(line))
    return records


def truncate_metrics(path: Path, step: int) -> None:
    """Drop metric lines after ``step`` (written by the interrupted run after its checkpoint) and torn lines."""
    if not path.exists():
        return
    kept = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue
        if record.get("step", 0) <= step:
            kept.append(line + "\n")
    atomic_write_text(path, "".join(kept))


# ---------------------------------------------------------------------- plotting
#: metrics drawn in the scores panel besides every ``*accuracy`` / ``*f1`` (fine-tuning tasks' metrics)
SCORE_KEYS = frozenset({"exact_match", "matthews_correlation", "pearson", "spearman", "precision", "recall"})
#: an embedding model's headline scores during training (retrieval, similarity), under any name prefix
EMBEDDING_SCORES = ("ndcg@10", "mrr@10", "map@100", "recall@100", "spearman_cosine")


#: what each split's curve is measured on, in the legend: "train" and "eval" alone read as the same number twice
SPLIT_NAMES = {"train": "training batches", "eval": "held-out"}
#: where a metric is measured, in the legend, for the metrics whose name does not say it (the pretraining
#: evaluation reports MLM accuracy at [MASK] positions as well: the plot's is every position chosen for prediction)
WHERE = {"mlm_accuracy": "all selected positions"}


def curve_label(split: str, key: str) -> str:
    """The legend of ``key``'s curve on ``split``: ``"mlm_accuracy at all selected positions, held-out"``."""
    where = f" at {WHERE[key]}" if key in WHERE else ""
    return f"{key}{where}, {SPLIT_NAMES.get(split, split)}"


def is_score(key: str) -> bool:
    """Whether the metric ``key`` is drawn in the plot's scores panel."""
    return key.endswith(("accuracy", "f1", *EMBEDDING_SCORES)) or key in SCORE_KEYS


def plot_metrics(metrics_path: str | Path, png_path: str | Path) -> Path | None:
    """Plot loss (train and eval) and the score metrics (accuracy, F1, ...) against step into a PNG.

    matplotlib is optional (``pip install 'bertkit[plot]'``): without it this prints a
    message to stderr and returns None. Returns ``png_path`` otherwise.
    """
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError:
        print("plot_metrics: matplotlib is not installed (pip install 'bertkit[plot]'); no plot written.",
              file=sys.stderr)
        return None
    records = read_metrics(metrics_path)
    score_keys = sorted({k for r in records for k in r if is_score(k)})
    panels = [("loss", ["loss"]), *([("scores", score_keys)] if score_keys else [])]
    figure = Figure(figsize=(6 * len(panels), 4), layout="constrained")
    FigureCanvasAgg(figure)
    for i, (title, keys) in enumerate(panels):
        axes = figure.add_subplot(1, len(panels), i + 1)
        for split in ("train", "eval"):
            for key in keys:
                points = [(r["step"], r[key]) for r in records if r.get("split", "train") == split
                          and r.get(key) is not None]
                if points:
                    axes.plot(*zip(*points), label=curve_label(split, key), marker="o" if split == "eval" else None)
        axes.set_xlabel("step")
        axes.set_title(title)
        axes.legend()
    png_path = Path(png_path)
    png_path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(png_path)
    return png_path
