"""Freed heap memory goes back to the system during training (bertkit.training.allocator): the Trainer calls
malloc_trim every TRIM_EVERY steps on glibc; BERTKIT_MALLOC=default turns it off; elsewhere it is a no-op."""

import pytest
import torch
from torch import nn

from bertkit.training import Trainer, TrainingConfig, allocator

glibc = pytest.mark.skipif(allocator._glibc() is None, reason="glibc only (malloc_trim)")


class Toy(nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(4, 1)

    def training_step(self, batch):
        return ((self.linear(batch["x"]).squeeze(-1) - batch["y"]) ** 2).mean(), {}


def train_toy(out, steps: int) -> Trainer:
    data = [{"x": torch.full((4,), float(i)), "y": torch.tensor(float(i))} for i in range(16)]
    config = TrainingConfig(max_steps=steps, batch_size=4, learning_rate=1e-3, warmup_steps=0, output_dir=str(out),
                            device="cpu", progress_bar=False, precision="fp32", log_every=1)
    trainer = Trainer(Toy(), data, config=config)
    trainer.train()
    return trainer


@glibc
def test_trim_gives_freed_memory_back(monkeypatch):
    monkeypatch.delenv(allocator.ENV, raising=False)
    calls = []
    libc = allocator._glibc()
    monkeypatch.setattr(allocator, "_glibc", lambda: type("Libc", (), {
        "malloc_trim": staticmethod(lambda pad: calls.append(pad) or libc.malloc_trim(pad))})())
    assert isinstance(allocator.trim_malloc(), bool) and calls == [0]


def test_the_trainer_trims_every_few_steps(tmp_path, monkeypatch):
    trims = []
    monkeypatch.setattr(allocator, "TRIM_EVERY", 2)
    monkeypatch.setattr(allocator, "trim_malloc", lambda: trims.append(1) or True)
    train_toy(tmp_path, steps=7)
    assert len(trims) == 3  # after steps 2, 4 and 6


@glibc
def test_bertkit_malloc_default_turns_it_off(monkeypatch):
    monkeypatch.setenv(allocator.ENV, "default")
    assert not allocator.enabled() and allocator.trim_malloc() is False


def test_elsewhere_it_is_a_no_op(tmp_path, monkeypatch):
    monkeypatch.setattr(allocator, "_glibc", lambda: None)
    assert not allocator.enabled() and allocator.trim_malloc() is False
    train_toy(tmp_path, steps=2)
