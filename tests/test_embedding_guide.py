"""GIST training with a guide model: the guide's similarities equal sentence-transformers' GISTEmbedLoss with the
same guide (one that shares the student's vocabulary, and one that does not and must retokenize), and the command
trains with ``--loss gist --guide MODEL``."""

from __future__ import annotations

import json

import pytest
import torch

from bertkit.cli import main as cli
from bertkit.sentence import SentenceTransformer
from bertkit.sentence.data import PairCollator, RowBatch
from bertkit.sentence.losses.guide import load_guide
from bertkit.sentence.training import BiEncoder, build_loss
from test_embedding_training import COMMON, WORDS, write_base, write_pairs

st = pytest.importorskip("sentence_transformers")
st_losses = pytest.importorskip("sentence_transformers.losses")


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("gist")
    student = write_base(root / "student", dropout=0.0)
    same = write_base(root / "same-vocab", dropout=0.0, seed=1)
    # other ids for the same words, and words the student does not have
    other = write_base(root / "other-vocab", dropout=0.0, words=[*reversed(WORDS), "x1", "x2"], seed=2)
    return student, {"same": same, "other": other}


def rows(n: int = 6, seed: int = 3):
    generator = torch.Generator().manual_seed(seed)
    pick = lambda k: " ".join(WORDS[int(i)] for i in torch.randint(len(WORDS), (k,), generator=generator))  # noqa: E731
    return [{"anchor": pick(3), "positive": pick(5)} for _ in range(n)]


@pytest.mark.parametrize("vocabulary", ["same", "other"])
def test_the_loss_equals_sentence_transformers_gist_with_the_same_guide(models, vocabulary):
    student_dir, guides = models
    net = SentenceTransformer(student_dir, optimize=False)
    guide = load_guide(guides[vocabulary], net.tokenizer)
    assert guide.retokenize == (vocabulary == "other")
    batch_rows = rows()
    batch = PairCollator(net.tokenizer, max_length=net.max_seq_length)(
        RowBatch("rows", batch_rows, [f"row {i}" for i in range(len(batch_rows))]))
    ours = BiEncoder(net, build_loss("gist", guide=guide, scale=20.0))
    value = ours.training_step({"pairs": batch})[0]

    student = st.SentenceTransformer(str(student_dir), device="cpu")
    reference = st_losses.GISTEmbedLoss(student, st.SentenceTransformer(str(guides[vocabulary]), device="cpu"),
                                        temperature=0.05)
    features = [student.tokenize([r[column] for r in batch_rows]) for column in ("anchor", "positive")]
    expected = reference(features, torch.zeros(len(batch_rows)))
    torch.testing.assert_close(value, expected, rtol=1e-5, atol=1e-6)

    value.backward()
    expected.backward()
    ours_grads = dict(net.bert.named_parameters())
    compared = 0
    for name, parameter in student[0].auto_model.named_parameters():
        if parameter.grad is not None and name in ours_grads:
            torch.testing.assert_close(ours_grads[name].grad, parameter.grad, rtol=1e-4, atol=1e-6)
            compared += 1
    assert compared >= 30  # every encoder weight (the pooler gets no gradient)


def test_the_command_trains_with_a_guide_of_another_vocabulary(models, tmp_path):
    student_dir, guides = models
    train = write_pairs(tmp_path / "pairs.jsonl", 16)
    out = tmp_path / "run"
    assert cli(["finetune", "embed", "--model", str(student_dir), "--train", str(train), "-o", str(out),
                "--loss", "gist", "--guide", str(guides["other"]), "--batch-size", "8", "--max-steps", "2",
                "--precision", "fp32", "--device", "cpu"]) == 0
    run = json.loads((out / "run.json").read_text())
    assert json.dumps(run).count(str(guides["other"])) >= 1
    card = (out / "model" / "README.md").read_text()
    assert "GISTEmbedLoss" in card and "guide" in card
    reloaded = SentenceTransformer(out / "model")
    assert reloaded.encode(["w1 w2"]).shape == (1, 36)


@pytest.mark.parametrize("flags, message", [
    (["--loss", "gist"], "--loss gist needs --guide MODEL"),
    (["--loss", "mnrl", "--guide", "GUIDE"], "--guide does not apply to --loss mnrl; it applies to gist"),
    (["--loss", "gist", "--guide", "MISSING"], "--guide"),
])
def test_guide_flags_are_one_line_errors(models, tmp_path, capsys, flags, message):
    student_dir, guides = models
    flags = [str(guides["other"]) if f == "GUIDE" else str(tmp_path / "nothing") if f == "MISSING" else f
             for f in flags]
    train = write_pairs(tmp_path / "pairs.jsonl", 16)
    assert cli(["finetune", "embed", "--model", str(student_dir), "--train", str(train), "-o", str(tmp_path / "o"),
                *flags, *("--batch-size", "8", "--max-steps", "1")]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0], err


def test_python_api_takes_the_guide(models, tmp_path):
    from bertkit.sentence.training import finetune_embeddings

    student_dir, guides = models
    train = write_pairs(tmp_path / "pairs.jsonl", 16)
    result = finetune_embeddings(student_dir, train, tmp_path / "run", loss="gist", guide=guides["same"],
                                 max_steps=2, **COMMON)
    assert result.results["steps"] == 2
