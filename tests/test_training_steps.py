"""Every task model trains: ``training_step(batch)`` returns exactly ``get_loss`` on the same batch, with
metrics, and the one Trainer runs it."""

import math

import pytest
import torch

from bertkit import (
    BERTForCausalLM,
    BERTForMaskedLM,
    BERTForMultipleChoice,
    BERTForNextSentencePrediction,
    BERTForPreTraining,
    BERTForQuestionAnswering,
    BERTForSequenceClassification,
    BERTForTokenClassification,
    devices,
)
from bertkit.training import Trainer, TrainingConfig
from conftest import NSP, mlm_labels_for, model_of, padded_batch

IDS, MASK, TYPES = padded_batch(type_vocab=2)
INPUTS = dict(input_ids=IDS, attention_mask=MASK, token_type_ids=TYPES)
TOKEN_LABELS = torch.where(MASK == 1, torch.randint(0, 5, IDS.shape, generator=torch.Generator().manual_seed(3)),
                           -100)


def _case(name):
    """(model, batch, get_loss(...) on the same batch, metric names) for each head."""
    if name == "sequence_single":
        model, labels = model_of(BERTForSequenceClassification, num_labels=3), torch.tensor([0, 2, 1])
        return model, {**INPUTS, "labels": labels}, model.get_loss(labels, **INPUTS), {"accuracy"}
    if name == "sequence_multi":
        model = model_of(BERTForSequenceClassification, num_labels=3)
        labels = torch.tensor([[1.0, 0, 1], [0, 0, 0], [0, 1, 0]])
        return model, {**INPUTS, "labels": labels}, model.get_loss(labels, **INPUTS), {"accuracy"}
    if name == "sequence_regression":
        model, labels = model_of(BERTForSequenceClassification, num_labels=1), torch.tensor([0.5, -1.0, 2.0])
        return model, {**INPUTS, "labels": labels}, model.get_loss(labels, **INPUTS), set()
    if name == "nsp":
        model = model_of(BERTForNextSentencePrediction)
        return model, {**INPUTS, "labels": NSP}, model.get_loss(NSP, **INPUTS), {"accuracy"}
    if name == "token":
        model = model_of(BERTForTokenClassification, num_labels=5)
        return model, {**INPUTS, "labels": TOKEN_LABELS}, model.get_loss(TOKEN_LABELS, **INPUTS), {"accuracy"}
    if name == "choice":
        model = model_of(BERTForMultipleChoice)
        choices = {k: torch.stack([v, v.roll(1, 0)], dim=1) for k, v in INPUTS.items()}  # [B, 2, L]
        labels = torch.tensor([1, 0, 1])
        return model, {**choices, "labels": labels}, model.get_loss(labels, **choices), {"accuracy"}
    if name == "qa":
        model = model_of(BERTForQuestionAnswering)
        start, end = torch.tensor([1, 3, 99]), torch.tensor([2, 5, 99])  # the third is out of range: ignored
        batch = {**INPUTS, "start_positions": start, "end_positions": end}
        return model, batch, model.get_loss(start, end, **INPUTS), {"exact_match"}
    if name == "causal":
        model = model_of(BERTForCausalLM, is_decoder=True)
        labels = torch.where(MASK == 1, IDS, -100)
        return model, {**INPUTS, "labels": labels}, model.get_loss(labels, **INPUTS), {"accuracy"}
    if name == "masked_lm":
        model, labels = model_of(BERTForMaskedLM), mlm_labels_for(IDS, MASK)
        return model, {**INPUTS, "mlm_labels": labels}, model.get_loss(labels, **INPUTS), {"mlm_accuracy"}
    model, labels = model_of(BERTForPreTraining), mlm_labels_for(IDS, MASK)
    batch = {**INPUTS, "mlm_labels": labels, "nsp_labels": NSP}
    return model, batch, model.get_loss(labels, NSP, **INPUTS), {"mlm_accuracy", "nsp_accuracy"}


CASES = ["sequence_single", "sequence_multi", "sequence_regression", "nsp", "token", "choice", "qa", "causal",
         "masked_lm", "pretraining"]


@pytest.mark.parametrize("name", CASES)
def test_training_step_loss_is_get_loss(name):
    model, batch, expected, metric_names = _case(name)
    loss, metrics = model.training_step(batch)
    torch.testing.assert_close(loss, expected, rtol=0, atol=1e-6)
    assert loss.requires_grad and metrics["loss"] == loss.detach()
    assert metric_names <= set(metrics)
    for value in metrics.values():
        assert value.dim() == 0 and not value.requires_grad


def test_training_step_names_missing_labels():
    model = model_of(BERTForQuestionAnswering)
    with pytest.raises(ValueError, match=r"needs the labels under \['start_positions', 'end_positions'\]; the "
                                         r"batch lacks \['end_positions'\]"):
        model.training_step({**INPUTS, "start_positions": torch.tensor([1, 2, 3])})


def test_accuracy_metric_counts_only_labelled_positions():
    model = model_of(BERTForTokenClassification, num_labels=5)
    _, metrics = model.training_step({**INPUTS, "labels": TOKEN_LABELS})
    predictions = model.predict(**INPUTS)
    valid = TOKEN_LABELS != -100
    assert metrics["accuracy"].item() == pytest.approx((predictions == TOKEN_LABELS)[valid].float().mean().item())


@pytest.mark.parametrize("name", ["sequence_single", "token", "choice", "qa"])
def test_every_head_trains_with_the_trainer(name, tmp_path):
    model, batch, _, _ = _case(name)
    examples = [{k: v[i] for k, v in batch.items()} for i in range(3)] * 8

    def collate(items):
        return {k: torch.stack([item[k] for item in items]) for k in items[0]}

    before = model.get_loss(*[batch[k] for k in model.label_keys], **{
        k: v for k, v in batch.items() if k not in model.label_keys}).item()
    config = TrainingConfig(max_steps=30, batch_size=6, learning_rate=3e-3, log_every=10, progress_bar=False,
                            output_dir=str(tmp_path), eval_every=30)
    trainer = Trainer(model, examples, config=config, collate_fn=collate, eval_dataset=examples[:3])
    trainer.train()
    model.eval()
    after = model.get_loss(*[batch[k] for k in model.label_keys], **{
        k: v for k, v in batch.items() if k not in model.label_keys}).item()
    assert math.isfinite(after) and after < before  # it learns the three examples
    assert "loss" in trainer.last_eval


def test_predict_batches_runs_in_order_in_eval_mode_and_restores_the_mode():
    from bertkit.training import predict_batches

    model, batch, _, _ = _case("sequence_single")
    examples = [{k: v[i] for k, v in batch.items()} for i in range(3)] * 3

    def collate(items):
        return {k: torch.stack([item[k] for item in items]) for k in items[0]}

    model.train()
    seen = list(predict_batches(model, examples, collate_fn=collate, batch_size=4, precision="bf16"))
    assert model.training and [len(b["labels"]) for b, _ in seen] == [4, 4, 1]
    logits = torch.cat([out for _, out in seen])
    assert logits.dtype == torch.float32 and logits.device.type == "cpu" and not logits.requires_grad
    model.eval()
    # precision="bf16" on a CPU without native bf16 warns and runs fp32 (resolve_precision)
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=devices.cpu_bf16()):
        expected = model(**{k: torch.cat([v] * 3) for k, v in INPUTS.items()}).float()
    torch.testing.assert_close(logits, expected)


#: the batch keys of ``get_loss``'s labels, in its order, where they are not the model's ``label_keys``
GET_LOSS_LABELS = {"masked_lm": ("mlm_labels",), "pretraining": ("mlm_labels", "nsp_labels")}


def _flat(values) -> torch.Tensor:
    values = values if isinstance(values, tuple) else (values,)
    return torch.stack([torch.as_tensor(v).float().cpu().reshape(-1) for v in values]).reshape(-1)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("name", CASES)
def test_a_gpu_model_takes_cpu_labels_as_it_takes_cpu_inputs(name):
    """get_loss / get_accuracy / predict of a model on the GPU, given CPU tensors (inputs and labels, as a model
    trained by the Trainer on ``device="auto"`` is then called): the values of the same model on the CPU."""
    model, batch, expected, _ = _case(name)
    keys = GET_LOSS_LABELS.get(name, model.label_keys)
    labels = [batch[k] for k in keys]
    inputs = {k: v for k, v in batch.items() if k not in keys}
    # no accuracy for regression, nor (argmax predictions) for multi-label targets
    accuracy = None if name in ("sequence_regression", "sequence_multi") else model.get_accuracy(*labels, **inputs)
    predicted = model.predict(**inputs) if name == "qa" else None  # spans within the CPU attention mask
    model.cuda()
    loss = model.get_loss(*labels, **inputs)
    assert loss.device.type == "cuda"
    torch.testing.assert_close(loss.cpu(), expected, rtol=1e-4, atol=1e-5)
    if accuracy is not None:
        torch.testing.assert_close(_flat(model.get_accuracy(*labels, **inputs)), _flat(accuracy), equal_nan=True)
    if predicted is not None:
        assert [p.tolist() for p in model.predict(**inputs)] == [p.tolist() for p in predicted]
