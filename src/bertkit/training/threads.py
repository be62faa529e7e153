"""The CPU thread count of a training run: given, or measured on the run's own first steps.

On a busy machine threads can wait on each other so long that one thread alone trains faster (seen: 2.4-8.4
s/step with torch's 2 threads, 0.88 with one). ``threads="auto"`` (the default of ``pretrain`` and
``finetune``) times :data:`WINDOW` steps with the process's threads and :data:`WINDOW` with one, after
:data:`WARMUP` steps, and keeps the faster for the rest of the run; an integer sets the count outright.

Measuring is safe for the numbers because a CPU training step gives the same bits whatever the thread count
(:mod:`bertkit.modeling.norm`, :mod:`bertkit.training.gradnorm`; tested): the choice changes the speed only.
What was chosen and measured is :meth:`ThreadChoice.report`, which the run records in ``run.json``.
"""

from __future__ import annotations

from typing import Any

import torch

#: steps not timed first (allocations, the first oneDNN kernels)
WARMUP = 2
#: steps timed with each thread count
WINDOW = 3


def parse_threads(value: int | str | None, name: str = "threads") -> int | str | None:
    """``"auto"``, a positive int, or None (leave torch's count as it is) from what a user gave; ValueError
    naming ``name`` otherwise."""
    if value is None or value == "auto":
        return value
    try:
        threads = int(value)
    except (TypeError, ValueError):
        threads = 0
    if threads < 1 or isinstance(value, bool) or (isinstance(value, float) and value != threads):
        raise ValueError(f"{name} must be 'auto' or a positive number of CPU threads, got {value!r}.")
    return threads


class ThreadChoice:
    """Sets or measures the thread count (module docstring); a Trainer calls :meth:`step_done` after each step."""

    def __init__(self, threads: int | str | None = "auto", device: torch.device | str = "cpu"):
        self.requested = parse_threads(threads)
        self.available = torch.get_num_threads()
        self.timed: dict[int, list[float]] = {}
        self.measuring, self.steps = False, 0
        if torch.device(device).type != "cpu":
            self.how = "not used (the run is on a GPU)"
        elif self.requested is None:
            self.how = "the process's"
        elif self.requested != "auto":
            torch.set_num_threads(self.requested)
            self.how = "given"
        elif self.available > 1:
            self.measuring, self.how = True, "measuring"
            self.timed = {self.available: [], 1: []}
        else:
            self.how = "one available"

    def step_done(self, seconds: float) -> None:
        """Take the duration of the training step this process just ran."""
        self.steps += 1
        if not self.measuring or self.steps <= WARMUP:
            return
        current = torch.get_num_threads()
        self.timed[current].append(seconds)
        if len(self.timed[current]) < WINDOW:
            return
        if current != 1:
            torch.set_num_threads(1)
            return
        self.measuring = False
        best = min(self.timed, key=lambda n: sorted(self.timed[n])[WINDOW // 2])
        torch.set_num_threads(best)
        self.how = "measured"

    def report(self) -> dict[str, Any]:
        """``{"threads": now, "available": ..., "chosen": how, "seconds_per_step": {threads: median}}``."""
        medians = {str(n): round(sorted(t)[len(t) // 2], 4) for n, t in self.timed.items() if t}
        return {"threads": torch.get_num_threads(), "available": self.available, "chosen": self.how,
                **({"seconds_per_step": medians} if medians else {})}
