"""Pretraining end to end: text -> tokenizer -> data -> training -> saved model + metrics + evaluation; the CLI."""

import json

import pytest
import torch

import bertkit
from bertkit.resources import austen_novels
from bertkit.tasks.pretraining import evaluate_pretraining, most_frequent_token, pretrain_from_text
from bertkit.training import TrainingConfig


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    root = tmp_path_factory.mktemp("pretrain")
    text = root / "persuasion.txt"
    text.write_text(austen_novels()["persuasion"][:250_000], encoding="utf-8")
    training = TrainingConfig(max_steps=12, batch_size=16, learning_rate=1e-3, warmup_steps=2, log_every=4,
                              eval_every=6, progress_bar=False)
    result = pretrain_from_text([text], root / "out", model="tiny", vocab_size=1500, max_seq_length=64,
                                heldout_every=5, training=training, progress=False,
                                model_overrides=dict(num_hidden_layers=1, hidden_size=64, num_attention_heads=2,
                                                     intermediate_size=128))
    return result


def test_outputs_are_written_and_loadable(run):
    result = run
    lines = [json.loads(line) for line in result.metrics_path.read_text().splitlines()]
    assert [line["step"] for line in lines if line.get("split") == "train"] == [4, 8, 12]
    assert any(line.get("split") == "eval" for line in lines)
    model = bertkit.BERTForPreTraining.from_pretrained(result.model_dir)
    tokenizer = bertkit.BERTTokenizerFast.from_pretrained(result.model_dir)
    assert model.config.vocab_size == tokenizer.vocab_size <= 1500
    assert model.config.mask_token_id == tokenizer.mask_token_id
    assert json.loads((result.output_dir / "evaluation.json").read_text()) == pytest.approx(
        {k: v for k, v in result.evaluation.items() if k != "unigram_token"} | {
            "unigram_token": result.evaluation["unigram_token"]}, nan_ok=True)
    assert model.fill_mask(tokenizer, "she was [MASK] to see him.", top_k=3)


def test_evaluation_reports_baselines(run):
    result = run
    ev = result.evaluation
    for key in ("mlm_accuracy_masked", "unigram_accuracy_masked", "mlm_accuracy_selected",
                "unigram_accuracy_selected", "nsp_accuracy", "nsp_chance"):
        assert 0.0 <= ev[key] <= 1.0, key
    assert ev["masked_positions"] < ev["selected_positions"]  # 80% of the selected become [MASK]
    assert 0.7 < ev["masked_positions"] / ev["selected_positions"] < 0.9


def test_evaluation_is_reproducible_and_unigram_is_frequent(run):
    from bertkit.data.shards import PretrainingDataset

    result = run
    data = PretrainingDataset(result.output_dir / "data" / "heldout")
    model = bertkit.BERTForPreTraining.from_pretrained(result.model_dir)
    first = evaluate_pretraining(model, data, seed=3)
    assert evaluate_pretraining(model, data, seed=3) == first
    tokenizer = data.load_tokenizer()
    top = most_frequent_token(data, tokenizer.all_special_ids)
    assert tokenizer.convert_ids_to_tokens(top) in {",", ".", "the", "to", "and", "of"}


def test_held_out_cross_entropy_beside_the_unigram_models(run):
    """The loss at the predicted positions equals the model's own loss on the same masks (get_loss), and the
    unigram model's is the add-one smoothed frequencies' -log p averaged over the same targets."""
    from bertkit.data.shards import PretrainingDataset
    from bertkit.tasks.pretraining import _seeded_collator, token_counts, unigram_surprisal

    data = PretrainingDataset(run.output_dir / "data" / "heldout")
    model = bertkit.BERTForPreTraining.from_pretrained(run.model_dir).eval()
    ev = evaluate_pretraining(model, data, seed=5, batch_size=len(data))
    batch = _seeded_collator(data, 5)([data[i] for i in range(len(data))])
    labels = batch["mlm_labels"]
    with torch.no_grad():
        loss = model.get_loss(labels, batch["nsp_labels"], batch["input_ids"], batch["attention_mask"],
                              batch["token_type_ids"], nsp_weight=0.0)
    assert ev["mlm_loss_selected"] == pytest.approx(float(loss), rel=1e-4)
    counts = token_counts(data, data.load_tokenizer().all_special_ids).double()
    probabilities = (counts + 1) / (counts + 1).sum()
    want = -probabilities.log()[labels[labels != -100]].mean()
    assert ev["unigram_loss_selected"] == pytest.approx(float(want), rel=1e-9)
    torch.testing.assert_close(unigram_surprisal(counts.long()), -probabilities.log())
    assert ev["mlm_loss_masked"] > 0 and ev["unigram_loss_masked"] > 0


def test_cli_pretrain_from_data_and_fill_mask(run, tmp_path, capsys):
    from bertkit.cli import main

    result = run
    data = result.output_dir / "data"
    args = ["pretrain", "--data", str(data / "train"), "--eval-data", str(data / "heldout"), "--model",
            str(_tiny_config(tmp_path)), "-o", str(tmp_path / "cli"), "--max-steps", "4", "--batch-size", "8",
            "--log-every", "2", "--precision", "fp32"]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "mlm_accuracy_masked" in out and str(tmp_path / "cli" / "model") in out
    assert main(["fill-mask", str(tmp_path / "cli" / "model"), "she was [MASK] to see him.", "--top-k", "2"]) == 0
    assert "[MASK] 1:" in capsys.readouterr().out


def _tiny_config(tmp_path):
    path = tmp_path / "model.json"
    bertkit.BERTConfig(num_hidden_layers=1, hidden_size=32, num_attention_heads=2, intermediate_size=64,
                       max_position_embeddings=64).to_json_file(path)
    return path


def test_training_step_matches_get_loss():
    model = bertkit.bert_for_pre_training_tiny(vocab_size=300).eval()
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(5, 300, (4, 16), generator=g)
    labels = torch.where(torch.rand(4, 16, generator=g) < 0.2, ids, -100)
    nsp = torch.tensor([0, 1, 1, 0])
    batch = dict(input_ids=ids, attention_mask=torch.ones_like(ids), token_type_ids=torch.zeros_like(ids),
                 mlm_labels=labels, nsp_labels=nsp)
    loss, metrics = model.training_step(batch)
    torch.testing.assert_close(loss, model.get_loss(labels, nsp, ids, batch["attention_mask"], batch["token_type_ids"]))
    mlm_acc, nsp_acc, _ = model.get_accuracy(labels, nsp, ids, batch["attention_mask"], batch["token_type_ids"])
    torch.testing.assert_close(metrics["mlm_accuracy"], mlm_acc)
    torch.testing.assert_close(metrics["nsp_accuracy"], nsp_acc)
    assert int(metrics["mlm_tokens"]) == int((labels != -100).sum())
