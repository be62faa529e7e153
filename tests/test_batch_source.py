"""The Trainer's extension points: a batch source (:mod:`bertkit.training.batch_source`) and ``grad_sync``.

A toy batch source yields whole micro-batches of different sizes in a seeded order per epoch; a one-weight model
learns ``y = 2x``. Checked: workers collating the items train exactly as the training process does; a run cut at
a checkpoint and resumed (with workers) ends bit for bit as the whole run; ``examples_seen`` counts the rows;
the run's start line says the batch's split; what breaks the protocol or names an unknown ``grad_sync`` is one
line; the model's ``grad_sync`` is the default. (Under 2 gloo processes, ``grad_sync="manual"`` is
tests/test_embedding_ddp.py's cached loss.)
"""

from __future__ import annotations

import logging
import random

import pytest
import torch
from torch import nn

from bertkit.training import Trainer, TrainingConfig
from bertkit.training.checkpoint import latest_checkpoint

SIZES = [3, 5, 4, 2, 6, 4]  # rows of each micro-batch of an epoch


class Chunks:
    """A batch source: epoch ``e`` yields the micro-batches of :data:`SIZES` rows in a ``(seed, e)`` order."""

    def __init__(self, seed: int = 0):
        self.seed, self.epoch, self.taken = seed, 0, 0

    def __len__(self) -> int:
        return len(SIZES)

    def set_epoch(self, epoch: int) -> None:
        self.epoch, self.taken = epoch, 0

    def __iter__(self):
        order = random.Random(f"{self.seed}/{self.epoch}").sample(range(len(SIZES)), len(SIZES))
        for position in range(self.taken, len(order)):
            self.taken = position + 1
            first = sum(SIZES[: order[position]])
            yield [float(first + i) / 20 for i in range(SIZES[order[position]])]

    def state_dict(self) -> dict:
        return {"epoch": self.epoch, "taken": self.taken}

    def load_state_dict(self, state) -> None:
        self.epoch, self.taken = state["epoch"], state["taken"]


def collate(item: list[float]) -> dict[str, torch.Tensor]:
    return {"x": torch.tensor(item)[:, None]}


class Line(nn.Module):
    def __init__(self, grad_sync: str | None = None):
        super().__init__()
        torch.manual_seed(0)
        self.linear = nn.Linear(1, 1)
        self.dropout = nn.Dropout(0.2)  # the RNG state must resume too
        if grad_sync is not None:
            self.grad_sync = grad_sync

    def training_step(self, batch):
        x = batch["x"]
        return ((self.dropout(self.linear(x)) - 2 * x) ** 2).mean(), {}


def config(tmp_path, name: str, **changes) -> TrainingConfig:
    return TrainingConfig(**{"max_steps": 7, "batch_size": 8, "gradient_accumulation_steps": 2, "learning_rate": 0.1,
                             "device": "cpu", "precision": "fp32", "progress_bar": False, "save_every": 3,
                             "output_dir": str(tmp_path / name), **changes})


def train(tmp_path, name: str, resume: bool = False, **changes) -> Trainer:
    trainer = Trainer(Line(), batch_source=Chunks(), collate_fn=collate, config=config(tmp_path, name, **changes))
    trainer.train(resume_from="latest" if resume else None)
    return trainer


def test_workers_collate_the_items_and_train_as_the_process_does(tmp_path):
    alone, workers = train(tmp_path, "alone"), train(tmp_path, "workers", num_workers=2)
    assert workers.state.epoch == alone.state.epoch == 2  # 3 steps per epoch
    for a, b in zip(alone.model.parameters(), workers.model.parameters()):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


def test_a_run_cut_at_a_checkpoint_and_resumed_with_workers_ends_as_the_whole_run(tmp_path):
    whole = train(tmp_path, "whole")

    def cut(trainer):
        if trainer.state.step == 3:
            raise KeyboardInterrupt

    trainer = Trainer(Line(), batch_source=Chunks(), collate_fn=collate, config=config(tmp_path, "cut", num_workers=2),
                      callbacks={"on_save": cut})
    with pytest.raises(KeyboardInterrupt):
        trainer.train()
    assert latest_checkpoint(tmp_path / "cut").name.endswith("3")
    resumed = train(tmp_path, "cut", resume=True, num_workers=2)
    assert (resumed.state.step, resumed.state.examples_seen) == (whole.state.step, whole.state.examples_seen)
    for a, b in zip(whole.model.parameters(), resumed.model.parameters()):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


def test_examples_seen_counts_the_rows_trained_on(tmp_path):
    trainer = train(tmp_path, "rows", max_steps=3)  # one epoch: every micro-batch once
    assert trainer.state.examples_seen == sum(SIZES)


def test_the_run_says_how_its_batch_splits(tmp_path, caplog):
    with caplog.at_level(logging.INFO, logger="bertkit.training"):
        train(tmp_path, "said", max_steps=1)
    assert "batch size 8 rows per optimizer step = 4 per micro-batch and process x 1 process x 2 accumulation " \
           "steps" in caplog.text


class Incomplete(Chunks):
    set_epoch = None


@pytest.mark.parametrize("kwargs, error, message", [
    ({"batch_source": Incomplete()}, TypeError, r"The batch source lacks \['set_epoch'\]; see "
                                                r"bertkit.training.batch_source"),
    ({"batch_source": Chunks(), "sampler": object()}, ValueError, "Pass either train_dataset .* or batch_source"),
    ({"batch_source": Chunks(), "grad_sync": "hope"}, ValueError, r"grad_sync must be one of \('ddp', 'manual'\), "
                                                                  "got 'hope'"),
])
def test_what_breaks_the_protocol_is_one_line(tmp_path, kwargs, error, message):
    with pytest.raises(error, match=message) as info:
        Trainer(Line(), collate_fn=collate, config=config(tmp_path, "bad"), **kwargs)
    assert "\n" not in str(info.value)


def test_the_model_declares_its_gradient_sync_and_the_argument_overrides_it(tmp_path):
    assert Trainer(Line(), batch_source=Chunks(), config=config(tmp_path, "a")).grad_sync == "ddp"
    declared = Trainer(Line("manual"), batch_source=Chunks(), config=config(tmp_path, "b"))
    assert declared.grad_sync == "manual" and declared.ddp is None
    assert Trainer(Line("manual"), batch_source=Chunks(), config=config(tmp_path, "c"), grad_sync="ddp").grad_sync \
        == "ddp"
