"""``bertkit pretrain --objective electra`` (replaced-token detection with a generator) and ``--recipe roberta``
(a RoBERTa, MLM only, dynamic masking, full-length sequences): short CLI runs on a tiny model, their outputs read
by HF transformers with the same numbers, an exact resume, continuing an ELECTRA pair, refused combinations."""

import json
import lzma
import math
import shutil
from pathlib import Path

import pytest
import torch

import bertkit
from bertkit.cli import main
from bertkit.modeling.electra import ELECTRAForPreTraining
from bertkit.resources import austen_novels

transformers = pytest.importorskip("transformers")

#: a BERT config JSON: --objective electra / --recipe roberta build their family's model of this size
TINY = dict(num_hidden_layers=1, hidden_size=32, num_attention_heads=2, intermediate_size=37)
RTD_METRICS = {"loss", "mlm_loss", "mlm_accuracy", "discriminator_loss", "discriminator_accuracy", "replaced_share"}
SENTENCES = ["She was very glad to see him again.", "Anne had been walking in the garden with her sister."]
FINETUNE = Path(__file__).resolve().parents[1] / "data" / "finetune" / "vader_amazon"


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    root = tmp_path_factory.mktemp("objectives")
    book = root / "book.txt"
    book.write_text(austen_novels()["persuasion"][:60_000], encoding="utf-8")
    config = root / "tiny.json"
    config.write_text(json.dumps(TINY), encoding="utf-8")
    return root, book, config


def pretrain_args(book: Path, config: Path, out: Path, *extra) -> list[str]:
    return [str(a) for a in ("pretrain", "--text", book, "--model", config, "-o", out, "--vocab-size", 400,
                             "--max-seq-length", 32, "--batch-size", 8, "--max-steps", 6, "--log-every", 2,
                             "--save-every", 3, "--precision", "fp32", *extra)]


@pytest.fixture(scope="module")
def electra_run(inputs):
    root, book, config = inputs
    out = root / "electra"
    assert main(pretrain_args(book, config, out, "--objective", "electra")) == 0
    return out


@pytest.fixture(scope="module")
def roberta_run(inputs):
    root, book, config = inputs
    out = root / "roberta"
    assert main(pretrain_args(book, config, out, "--recipe", "roberta")) == 0
    return out


def train_lines(out: Path) -> list[dict]:
    return [line for line in map(json.loads, (out / "metrics.jsonl").read_text().splitlines())
            if line["split"] == "train"]


def encoded(directory: Path) -> dict[str, torch.Tensor]:
    tokenizer = bertkit.AutoTokenizer.from_pretrained(directory)
    enc = tokenizer(SENTENCES, padding=True, return_tensors="pt")
    return {"input_ids": enc["input_ids"], "attention_mask": enc["attention_mask"]}


def test_electra_run_writes_its_metrics_discriminator_and_generator(electra_run):
    lines = train_lines(electra_run)
    assert [line["step"] for line in lines] == [2, 4, 6]
    for line in lines:
        assert set(line) >= RTD_METRICS and "nsp_loss" not in line
        assert math.isfinite(line["loss"]) and 0 <= line["replaced_share"] <= 1
    discriminator = json.loads((electra_run / "model" / "config.json").read_text())
    generator = json.loads((electra_run / "generator" / "config.json").read_text())
    assert (discriminator["model_type"], discriminator["architectures"]) == ("electra", ["ElectraForPreTraining"])
    assert generator["architectures"] == ["ElectraForMaskedLM"]
    # the size of --model; embeddings as wide as it; the generator a quarter as wide over the same embeddings
    assert (discriminator["hidden_size"], discriminator["embedding_size"], discriminator["num_hidden_layers"]) == \
        (32, 32, 1)
    assert (generator["hidden_size"], generator["embedding_size"]) == (8, 32)
    for directory in ("model", "generator"):
        assert (electra_run / directory / "vocab.txt").is_file()
    task = json.loads((electra_run / "run.json").read_text())["task"]
    assert (task["objective"], task["generator_size"]) == ("electra", 0.25)
    evaluation = json.loads((electra_run / "evaluation.json").read_text())
    assert 0 <= evaluation["discriminator_accuracy"] <= 1 and 0 <= evaluation["mlm_accuracy_masked"] <= 1
    assert evaluation["all_original_accuracy"] == pytest.approx(
        1 - evaluation["replaced_tokens"] / evaluation["real_tokens"])


def test_electra_output_reads_the_same_in_hf(electra_run):
    model_dir, generator_dir = electra_run / "model", electra_run / "generator"
    batch = encoded(model_dir)
    real = batch["attention_mask"].bool()
    hf = transformers.ElectraForPreTraining.from_pretrained(model_dir).eval()
    with torch.no_grad():
        theirs = hf(**batch, output_hidden_states=True)
        torch.testing.assert_close(ELECTRAForPreTraining.from_pretrained(model_dir)(**batch)[real],
                                   theirs.logits[real], atol=2e-5, rtol=2e-5)
        with pytest.warns(bertkit.LoadWarning, match="discriminator_predictions"):  # the backbone alone
            backbone = bertkit.BERT.from_pretrained(model_dir)
        sequence, _ = backbone(batch["input_ids"], batch["attention_mask"])
        torch.testing.assert_close(sequence[real], theirs.hidden_states[-1][real], atol=2e-5, rtol=2e-5)
        hf_generator = transformers.ElectraForMaskedLM.from_pretrained(generator_dir).eval()
        torch.testing.assert_close(bertkit.BERTForMaskedLM.from_pretrained(generator_dir)(**batch)[real],
                                   hf_generator(**batch).logits[real], atol=2e-5, rtol=2e-5)


def test_electra_run_resumed_after_its_first_checkpoint_ends_the_same(inputs, electra_run):
    """A copy of the run cut back to its step-3 checkpoint, resumed (the objective comes from the run), ends with
    the same discriminator and generator, bit for bit."""
    root, book, config = inputs
    cut = root / "electra-cut"
    shutil.copytree(electra_run, cut)
    for name in ("checkpoints/step-00000006", "model", "generator"):
        shutil.rmtree(cut / name)
    (cut / "evaluation.json").unlink()
    assert main(pretrain_args(book, config, cut, "--resume")) == 0
    for name in ("model", "generator"):
        assert (cut / name / "model.safetensors").read_bytes() == \
            (electra_run / name / "model.safetensors").read_bytes(), name
    # the same logged losses, but at step 4: its window (steps 3-4) lost step 3 to the cut
    assert [(line["step"], line["loss"] if line["step"] != 4 else None) for line in train_lines(cut)] == \
        [(line["step"], line["loss"] if line["step"] != 4 else None) for line in train_lines(electra_run)]


def test_electra_continues_a_pair(inputs, electra_run):
    """--init-from a run's output (model/ + generator/): both are loaded, the held-out set is scored before."""
    root, _, _ = inputs
    data = electra_run / "data"
    out = root / "electra-continued"
    assert main(["pretrain", "--data", str(data / "train"), "--eval-data", str(data / "heldout"), "--init-from",
                 str(electra_run), "--objective", "electra", "-o", str(out), "--max-steps", "2", "--batch-size", "8",
                 "--precision", "fp32"]) == 0
    info = json.loads((out / "run.json").read_text())
    assert info["init_from"]["source"] == str(electra_run) and info["task"]["generator_size"] is None
    assert info["init_from"]["generator"]["weights_sha256"]  # the run's own generator, not a new one
    evaluation = json.loads((out / "evaluation.json").read_text())
    assert "discriminator_accuracy" in evaluation["before"]
    assert json.loads((out / "generator" / "config.json").read_text())["hidden_size"] == 8


def test_electra_discriminator_finetunes(inputs, electra_run):
    root, _, _ = inputs
    with lzma.open(FINETUNE / "train.tsv.xz", "rt", encoding="utf-8") as f:
        lines = f.read().splitlines()[:33]
    train = root / "train.tsv"
    train.write_text("\n".join(lines) + "\n", encoding="utf-8")
    out = root / "classify"
    assert main(["finetune", "classify", "--model", str(electra_run / "model"), "--train", str(train),
                 "--text-column", "sentence", "-o", str(out), "--epochs", "1", "--batch-size", "16",
                 "--max-seq-length", "32"]) == 0
    config = json.loads((out / "model" / "config.json").read_text())
    assert config["architectures"] == ["ElectraForSequenceClassification"]


def test_roberta_recipe_builds_a_roberta_with_the_tokenizers_ids(roberta_run):
    lines = train_lines(roberta_run)
    assert [line["step"] for line in lines] == [2, 4, 6]
    for line in lines:
        assert {"loss", "mlm_loss", "mlm_accuracy"} <= set(line) and "nsp_loss" not in line
        assert math.isfinite(line["loss"])
    model_dir = roberta_run / "model"
    config = json.loads((model_dir / "config.json").read_text())
    tokenizer = bertkit.AutoTokenizer.from_pretrained(model_dir)
    assert (config["model_type"], config["architectures"], config["type_vocab_size"]) == \
        ("roberta", ["RobertaForMaskedLM"], 1)
    assert (config["pad_token_id"], config["bos_token_id"], config["eos_token_id"], config["mask_token_id"]) == \
        (tokenizer.pad_token_id, tokenizer.cls_token_id, tokenizer.sep_token_id, tokenizer.mask_token_id)
    assert config["max_position_embeddings"] - config["pad_token_id"] - 1 >= 32  # RoBERTa's positions start after pad
    index = json.loads((roberta_run / "data" / "train" / "index.json").read_text())
    assert (index["short_seq_prob"], index["random_next_prob"], index["static_masking"]) == (0.0, 0.0, False)
    assert json.loads((roberta_run / "run.json").read_text())["task"] == {"name": "pretraining", "recipe": "roberta"}
    assert "nsp_accuracy" not in json.loads((roberta_run / "evaluation.json").read_text())


def test_roberta_output_reads_the_same_in_hf(roberta_run):
    model_dir = roberta_run / "model"
    batch = encoded(model_dir)
    real = batch["attention_mask"].bool()
    hf = transformers.AutoModelForMaskedLM.from_pretrained(model_dir).eval()
    assert type(hf).__name__ == "RobertaForMaskedLM"
    ours = bertkit.BERTForMaskedLM.from_pretrained(model_dir)
    assert ours.config.family == "roberta"
    with torch.no_grad():
        torch.testing.assert_close(ours(**batch)[real], hf(**batch).logits[real], atol=2e-5, rtol=2e-5)


@pytest.mark.parametrize(("extra", "message"), [
    (["--objective", "electra", "--nsp"], "(--nsp) does not combine with objective='electra'"),
    (["--recipe", "roberta", "--nsp"], "(--nsp) does not combine with recipe='roberta'"),
    (["--recipe", "roberta", "--objective", "electra"], "are alternatives"),
    (["--generator-size", "0.5"], "it needs objective='electra'"),
    (["--objective", "electra", "--generator-size", "2"], "must lie in (0, 1]"),
], ids=["electra-nsp", "roberta-nsp", "roberta-electra", "generator-size-mlm", "generator-size-range"])
def test_bad_combinations_are_usage_errors(inputs, tmp_path, capsys, extra, message):
    _, book, config = inputs
    with pytest.raises(SystemExit) as exit_:
        main(pretrain_args(book, config, tmp_path / "out", *extra))
    assert exit_.value.code == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "out").exists()  # refused before anything was written


def test_recipe_roberta_refuses_init_from_and_static_masks(inputs, electra_run, tmp_path, capsys):
    _, book, config = inputs
    with pytest.raises(SystemExit):
        main(["pretrain", "--text", str(book), "--init-from", str(electra_run / "model"), "--recipe", "roberta",
              "-o", str(tmp_path / "a")])
    assert "(--init-from) continues a checkpoint as it is" in capsys.readouterr().err
    static = tmp_path / "static"
    bertkit.data.create_pretraining_data([str(book)], electra_run / "model", static, max_seq_length=32,
                                         static_masking=True, progress=False)
    assert main(["pretrain", "--data", str(static), "--model", str(config), "--recipe", "roberta",
                 "-o", str(tmp_path / "b")]) == 1
    assert "draws new masks for every batch" in capsys.readouterr().err


def test_electra_refuses_to_continue_a_bert(electra_run, tmp_path, capsys):
    bert = tmp_path / "bert"
    tokenizer = bertkit.BERTTokenizerFast.from_pretrained(electra_run / "model")
    bertkit.BERTForMaskedLM(bertkit.BERTConfig(vocab_size=tokenizer.vocab_size, **TINY)).save_pretrained(bert)
    tokenizer.save_pretrained(bert)
    data = electra_run / "data" / "train"
    assert main(["pretrain", "--data", str(data), "--init-from", str(bert), "--objective", "electra",
                 "-o", str(tmp_path / "out"), "--max-steps", "1"]) == 1
    assert "continues an ELECTRA discriminator, but" in capsys.readouterr().err


def test_mlm_refuses_an_electra_checkpoint_and_nsp_on_a_roberta(electra_run, tmp_path, capsys):
    data = electra_run / "data" / "train"
    assert main(["pretrain", "--data", str(data), "--init-from", str(electra_run / "model"),
                 "-o", str(tmp_path / "a"), "--max-steps", "1"]) == 1
    assert "is an ELECTRA checkpoint: continue it with its own objective" in capsys.readouterr().err
    roberta = tmp_path / "roberta.json"
    roberta.write_text(json.dumps({**TINY, "family": "roberta", "type_vocab_size": 1}), encoding="utf-8")
    assert main(["pretrain", "--data", str(data), "--model", str(roberta), "--nsp", "-o", str(tmp_path / "b"),
                 "--max-steps", "1"]) == 1
    assert "a family without a next-sentence head; pass --no-nsp" in capsys.readouterr().err


def test_a_resumed_run_keeps_its_generator_size(inputs, electra_run, tmp_path):
    """--generator-size left unset on --resume: the run's own (run.json's task), not the recipe's default."""
    import argparse

    from bertkit.cli.pretrain import defaults

    _, _, config = inputs
    run = tmp_path / "run"
    shutil.copytree(electra_run, run)
    info = json.loads((run / "run.json").read_text())
    info["task"]["generator_size"] = 0.5
    (run / "run.json").write_text(json.dumps(info))
    args = argparse.Namespace(resume=True, output=str(run), init_from=None, model=str(config), objective="electra",
                              recipe="bert")
    assert defaults(args)["generator_size"] == 0.5
