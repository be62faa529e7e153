"""bertkit's training engine against HF's ``Trainer``, step by step (test-only dependency; no network).

Issue 38 measured ``finetune classify`` a point or two below HF's ``Trainer``. What can differ, seeds apart, is
the engine: the learning rate of every step (warmup, linear decay), AdamW's parameter groups (which ones decay),
gradient clipping, the loss reduction. With the randomness taken out (one checkpoint, the
same example order, dropout off) and the same settings, both must take the same steps: the same loss and learning
rate at every step, and the same weights at the end. The data are odd-sized (21 examples, batch 4: an epoch is
5 whole batches and one example the last partial batch that both leave out here) with mixed lengths.
"""

from __future__ import annotations

import functools

import pytest
import torch

pytest.importorskip("transformers")

import transformers

from bertkit import BERTConfig
from bertkit.modeling import BERTForSequenceClassification
from bertkit.training import SeededSampler, Trainer, TrainingConfig

EXAMPLES, BATCH, EPOCHS, LR = 21, 4, 3, 1e-3


def features() -> list[dict]:
    g = torch.Generator().manual_seed(5)
    lengths = torch.randint(3, 14, (EXAMPLES,), generator=g).tolist()
    return [{"input_ids": [2, *torch.randint(5, 97, (n - 2,), generator=g).tolist(), 3], "labels": i % 3}
            for i, n in enumerate(lengths)]


def collate(rows: list[dict]) -> dict[str, torch.Tensor]:
    """Both sides' batches: right-padded ids, the attention mask, the labels."""
    width = max(len(r["input_ids"]) for r in rows)
    ids = torch.zeros(len(rows), width, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for i, r in enumerate(rows):
        ids[i, :len(r["input_ids"])], mask[i, :len(r["input_ids"])] = torch.tensor(r["input_ids"]), 1
    return {"input_ids": ids, "attention_mask": mask, "labels": torch.tensor([r["labels"] for r in rows])}


def start(tmp_path):
    """One random tiny checkpoint (odd sizes, dropout off) in HF format, with its 3-class head."""
    config = BERTConfig(vocab_size=97, hidden_size=24, num_hidden_layers=2, num_attention_heads=3,
                        intermediate_size=40, max_position_embeddings=32, hidden_dropout_prob=0.0,
                        attention_probs_dropout_prob=0.0, num_labels=3)
    torch.manual_seed(0)
    BERTForSequenceClassification(config).save_pretrained(tmp_path / "start")
    return tmp_path / "start"


@pytest.mark.parametrize(("warmup", "decay"), [(0.0, 0.0), (0.2, 0.1)], ids=["hf-defaults", "warmup-and-decay"])
def test_the_engine_takes_hf_trainers_steps(tmp_path, warmup, decay):
    checkpoint, data = start(tmp_path), features()
    steps = EPOCHS * (EXAMPLES // BATCH)
    ours = BERTForSequenceClassification.from_pretrained(checkpoint)
    config = TrainingConfig(max_steps=steps, learning_rate=LR, batch_size=BATCH, warmup_ratio=warmup,
                            weight_decay=decay, adam_epsilon=1e-8, max_grad_norm=0.5, precision="fp32",
                            device="cpu", output_dir=str(tmp_path / "bertkit"), progress_bar=False, log_every=1,
                            seed=1)
    our_steps: list[tuple[float, float]] = []
    Trainer(ours, data, config=config, collate_fn=collate,
            sampler_factory=functools.partial(SeededSampler, shuffle=False),
            callbacks={"on_log": lambda t: our_steps.append((t.last_log["loss"], t.last_log["lr"]))}).train()

    theirs = transformers.BertForSequenceClassification.from_pretrained(checkpoint)
    their_steps: list[tuple[float, float]] = []

    class InOrder(transformers.Trainer):  # the examples in file order, as ours here
        def _get_train_sampler(self, *args, **kwargs):
            return torch.utils.data.SequentialSampler(self.train_dataset)

    class Steps(transformers.TrainerCallback):
        def on_log(self, args, state, control, logs=None, **kwargs):
            if logs and "loss" in logs:
                their_steps.append((float(logs["loss"]), float(logs["learning_rate"])))

    arguments = transformers.TrainingArguments(
        output_dir=str(tmp_path / "hf"), num_train_epochs=EPOCHS, learning_rate=LR, per_device_train_batch_size=BATCH,
        warmup_steps=warmup, weight_decay=decay, max_grad_norm=0.5, seed=1,
        use_cpu=True, save_strategy="no", logging_steps=1, report_to="none", disable_tqdm=True,
        dataloader_drop_last=True)
    InOrder(model=theirs, args=arguments, data_collator=collate, train_dataset=data, callbacks=[Steps()]).train()

    assert len(our_steps) == len(their_steps) == steps
    for step, ((loss, lr), (hf_loss, hf_lr)) in enumerate(zip(our_steps, their_steps)):
        assert lr == pytest.approx(hf_lr, rel=1e-6), f"step {step + 1}: learning rate {lr} vs HF's {hf_lr}"
        assert loss == pytest.approx(hf_loss, abs=1e-4), f"step {step + 1}: loss {loss} vs HF's {hf_loss}"
    reference = dict(theirs.named_parameters())
    for name, weight in ours.named_parameters():
        torch.testing.assert_close(weight, reference[name], atol=1e-5, rtol=1e-4, msg=lambda m, n=name: f"{n}: {m}")
