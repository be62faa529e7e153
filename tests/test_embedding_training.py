"""``bertkit finetune embed`` / :func:`finetune_embeddings`: a bi-encoder trained through the one Trainer.

A tiny HF BERT (hidden 36, 3 heads, vocabulary of the test's own words) is the base. Checked: training lowers
the loss on its data; the saved directory loads in sentence-transformers 6.2.0 with bertkit's vectors and
prompts; the Trainer's first step has the loss and gradients of the loss called directly on the same batch;
a run killed after a checkpoint and an evaluation, then resumed, ends with the uninterrupted run's weights, bit
for bit, and its eval records; bad flags are one-line errors.
"""

from __future__ import annotations

import functools
import json
import random

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from bertkit.cli import main as cli
from bertkit.sentence import SentenceTransformer
from bertkit.sentence.data import EmbeddingDataset, PairCollator, RowBatch
from bertkit.sentence.losses.contrastive import MultipleNegativesRankingLoss
from bertkit.sentence.training import BiEncoder, finetune_embeddings, global_batches

WORDS = [f"w{i}" for i in range(60)]
COMMON = dict(batch_size=8, learning_rate=1e-3, precision="fp32", device="cpu", progress=False)


def write_base(directory, dropout: float, words=WORDS, seed: int = 0):
    """A tiny HF BertModel with a vocab.txt of ``words``: a plain checkpoint (mean pooling)."""
    from transformers import BertConfig, BertModel

    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *words]
    torch.manual_seed(seed)
    config = BertConfig(vocab_size=len(vocab), hidden_size=36, num_hidden_layers=2, num_attention_heads=3,
                        intermediate_size=37, max_position_embeddings=40, hidden_dropout_prob=dropout,
                        attention_probs_dropout_prob=dropout)
    BertModel(config).save_pretrained(directory)
    (directory / "vocab.txt").write_text("\n".join(vocab) + "\n")
    (directory / "tokenizer_config.json").write_text(json.dumps({"do_lower_case": True}))
    return directory


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    return write_base(tmp_path_factory.mktemp("base"), dropout=0.0)


def write_pairs(path, n: int, seed: int = 0):
    """(anchor, positive) rows: the positive repeats the anchor's words and adds one."""
    rng = random.Random(seed)
    with open(path, "w") as f:
        for _ in range(n):
            query = " ".join(rng.sample(WORDS, 4))
            f.write(json.dumps({"anchor": query, "positive": f"{query} {rng.choice(WORDS)}"}) + "\n")
    return path


def mean_loss(model_dir, path) -> float:
    """MNRL over the file's batches of 8, the model in eval mode."""
    net = SentenceTransformer(model_dir, optimize=False).eval()
    collate, loss = PairCollator(net.tokenizer), MultipleNegativesRankingLoss()
    with torch.no_grad():
        values = [loss(lambda x: net(**x), collate(batch)) for batch in EmbeddingDataset(path, 8, seed=1)]
    return float(torch.stack(values).mean())


def test_training_lowers_the_loss_and_the_directory_loads_in_sentence_transformers(base, tmp_path):
    st = pytest.importorskip("sentence_transformers")
    train = write_pairs(tmp_path / "pairs.jsonl", 40)
    result = finetune_embeddings(base, [train], tmp_path / "run", epochs=3, query_prompt="w1 ",
                                 document_prompt="w2 ", **COMMON)
    assert mean_loss(result.model_dir, train) < mean_loss(base, train) - 0.1
    assert result.results["steps"] == 15 and result.results["data"][0]["rows"] == 40
    assert (tmp_path / "run" / "metrics.jsonl").exists() and (tmp_path / "run" / "results.json").exists()

    ours, ref = SentenceTransformer(result.model_dir), st.SentenceTransformer(str(result.model_dir), device="cpu")
    assert ref.prompts["query"] == "w1 " and ref.prompts["document"] == "w2 "
    texts = ["w3 w4 w5", "w6", "w7 w8 w9 w10 w11 w12", "w0 zzz"]
    for kwargs in ({}, {"prompt_name": "query"}, {"prompt_name": "document"}):
        np.testing.assert_allclose(ref.encode(texts, **kwargs), ours.encode(texts, **kwargs), atol=1e-5,
                                   err_msg=str(kwargs))
    card = (result.model_dir / "README.md").read_text()
    for fact in (str(base), "pairs.jsonl", "40 rows", "mnrl", "MultipleNegativesRankingLoss", "15 (3.00 epochs)",
                 f"{result.results['final_train_loss']:.4f}"):
        assert fact in card


def first_step_gradients():
    """``(seen, callback)``: the callback (``on_train_begin``) fills ``seen`` with each parameter's gradient (by
    name, None without one) as the optimizer is about to take its first step."""
    seen = {}

    def capture(trainer):
        named = {id(p): name for name, p in trainer.model.model.named_parameters()}

        def grads(optimizer, args, kwargs):
            if not seen:
                seen.update({named[id(p)]: None if p.grad is None else p.grad.clone()
                             for g in optimizer.param_groups for p in g["params"]})
        trainer.optimizer.register_step_pre_hook(grads)

    return seen, capture


def test_a_step_is_the_loss_called_directly_on_the_same_batch(base, tmp_path):
    """The Trainer's first step (loss in metrics.jsonl, gradients seen before the optimizer steps) equals the
    loss called on the dataset's first batch with the base model: the adapter adds nothing."""
    train = write_pairs(tmp_path / "pairs.jsonl", 40)
    seen, capture = first_step_gradients()

    finetune_embeddings(base, train, tmp_path / "run", max_steps=1, max_grad_norm=None, seed=7,
                        callbacks={"on_train_begin": capture}, **COMMON)
    logged = json.loads((tmp_path / "run" / "metrics.jsonl").read_text().splitlines()[0])

    net = SentenceTransformer(base, optimize=False).train()
    batch = next(iter(EmbeddingDataset(train, 8, seed=7)))
    loss = MultipleNegativesRankingLoss()(lambda x: net(**x), PairCollator(net.tokenizer)(batch))
    loss.backward()
    assert logged["loss"] == pytest.approx(loss.item(), rel=1e-6)
    assert len(seen) == len(list(net.parameters()))
    for name, p in net.named_parameters():  # the pooler, unused, has no gradient either way
        if p.grad is None:
            assert seen[name] is None, name
        else:
            torch.testing.assert_close(seen[name], p.grad, rtol=1e-5, atol=1e-7, msg=name)


def killed_and_resumed(train, output_dir, step: int, **options):
    """``train(output_dir, **options)`` killed right after step ``step``, then resumed: the resumed run's result."""
    class Stop(Exception):
        pass

    def kill(trainer):
        if trainer.state.step == step:
            raise Stop()

    with pytest.raises(Stop):
        train(output_dir, callbacks={"on_step_end": kill}, **options)
    return train(output_dir, resume=True, **options)


def metrics(run) -> list[dict]:
    """The run's ``metrics.jsonl`` records without their timings."""
    from test_embedding_eval_during_training import TIMING

    lines = (run.output_dir / "metrics.jsonl").read_text().splitlines()
    return [{k: v for k, v in json.loads(line).items() if k not in TIMING} for line in lines]


def test_a_resumed_run_ends_with_the_uninterrupted_runs_weights(tmp_path):
    """Two files mixed by proportional sampling, dropout on, 8 steps over two epochs, a checkpoint at step 3,
    evaluated on a BEIR directory every 2 steps: the run killed at step 5 (after the evaluation at step 4, which
    the checkpoint does not hold) and resumed equals the whole run bit for bit (fp32, CPU), with the whole
    run's eval records, once each, and its results."""
    from safetensors.torch import load_file

    from test_embedding_eval_during_training import write_beir

    base = write_base(tmp_path / "base", dropout=0.1)
    files = [write_pairs(tmp_path / "a.jsonl", 24, seed=1), write_pairs(tmp_path / "b.jsonl", 16, seed=2)]
    options = dict(max_steps=8, save_every=3, loss="cached-mnrl", mini_batch_size=3,
                   eval_beir=write_beir(tmp_path / "beir"), eval_every=2, **COMMON)
    whole = finetune_embeddings(base, files, tmp_path / "whole", **options)
    resumed = killed_and_resumed(functools.partial(finetune_embeddings, base, files), tmp_path / "cut", 5, **options)

    assert [r["step"] for r in metrics(resumed) if r["split"] == "eval"] == [0, 2, 4, 6, 8]
    assert metrics(resumed) == metrics(whole)
    assert resumed.results == whole.results and resumed.results["evaluation"]["steps"] == [0, 2, 4, 6, 8]
    a, b = load_file(whole.model_dir / "model.safetensors"), load_file(resumed.model_dir / "model.safetensors")
    assert a.keys() == b.keys()
    for key in a:
        torch.testing.assert_close(a[key], b[key], rtol=0, atol=0, msg=key)


@pytest.mark.parametrize("flags, message", [
    (["--loss", "simcse"], "--loss 'simcse' is not a loss bertkit trains with; choose one of mnrl"),
    (["--matryoshka-dims", "64,16"], "--matryoshka-dims 64 is above the embedding dimension 36"),
    (["--loss", "triplet", "--scale", "10"], "--scale does not apply to --loss triplet"),
])
def test_bad_flags_are_one_line_errors(base, tmp_path, capsys, flags, message):
    train = write_pairs(tmp_path / "pairs.jsonl", 16)
    assert cli(["finetune", "embed", "--model", str(base), "--train", str(train), "-o", str(tmp_path / "o"),
                *flags]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0]


def test_the_command_reads_named_columns_and_records_matryoshka_and_the_similarity(base, tmp_path):
    train = tmp_path / "qd.jsonl"
    rows = [json.loads(line) for line in write_pairs(tmp_path / "pairs.jsonl", 16).read_text().splitlines()]
    train.write_text("".join(json.dumps({"d": r["positive"], "q": r["anchor"]}) + "\n" for r in rows))
    out = tmp_path / "out"
    assert cli(["finetune", "embed", "--model", str(base), "--train", str(train), "-o", str(out),
                "--columns", "q=anchor,d=positive", "--matryoshka-dims", "36,8", "--max-steps", "2",
                "--batch-size", "8", "--precision", "fp32", "--device", "cpu", "--threads", "1"]) == 0
    card = (out / "model" / "README.md").read_text()
    assert "MatryoshkaLoss" in card and "matryoshka_dims=[36, 8]" in card and "'q' -> anchor, 'd' -> positive" in card
    saved = json.loads((out / "model" / "config_sentence_transformers.json").read_text())
    assert saved["similarity_fn_name"] == "cosine"


@pytest.mark.parametrize("name, options, similarity", [
    ("margin-mse", {}, "dot"), ("kl", {}, "dot"), ("cached-mnrl", {"matryoshka_dims": [8]}, "cosine"),
    ("cosent", {}, "cosine"), ("triplet", {}, None)])
def test_the_saved_similarity_is_the_one_the_loss_trains(name, options, similarity):
    from bertkit.sentence.training import build_loss, trained_similarity

    assert trained_similarity(build_loss(name, **options)) == similarity


def test_gradient_accumulation_of_a_per_row_loss_equals_the_larger_batch(base, tmp_path):
    """cosine (a loss of each row alone): --batch-size 8 as 2 accumulated micro-batches of 4 rows trains as 1 batch
    of 8 (same rows, same order); an in-batch loss is told that its negatives stay each micro-batch's own."""
    rng = random.Random(1)
    train = tmp_path / "scored.jsonl"
    train.write_text("".join(json.dumps({"anchor": " ".join(rng.sample(WORDS, 3)),
                                         "positive": " ".join(rng.sample(WORDS, 4)), "label": rng.random()}) + "\n"
                             for _ in range(48)))
    options = {**COMMON, "loss": "cosine", "max_steps": 3, "warmup_ratio": 0.0}
    accumulated = finetune_embeddings(base, train, tmp_path / "acc", **{**options, "batch_size": 8},
                                      gradient_accumulation_steps=2)
    whole = finetune_embeddings(base, train, tmp_path / "whole", **{**options, "batch_size": 8})
    assert accumulated.results["epochs"] == pytest.approx(whole.results["epochs"]) == pytest.approx(0.5)
    ours, theirs = (load_file(r.model_dir / "model.safetensors") for r in (accumulated, whole))
    for name in theirs:
        torch.testing.assert_close(ours[name], theirs[name], rtol=1e-5, atol=1e-6, msg=name)
    with pytest.raises(ValueError, match="--gradient-accumulation-steps 96 is more than the 48 batches"):
        finetune_embeddings(base, train, tmp_path / "big", **{**options, "batch_size": 96},
                            gradient_accumulation_steps=96)
    with pytest.raises(ValueError, match=r"batch_size \(8\) must be divisible by gradient_accumulation_steps \(3\)"):
        finetune_embeddings(base, train, tmp_path / "odd", **options, gradient_accumulation_steps=3)
    with pytest.raises(ValueError, match=r"--batch-size 8 \(rows per optimizer step over all processes\) does not "
                                         r"split into 1 accumulation step\(s\) x 3 process\(es\); give a "
                                         r"multiple of 3"):
        global_batches([train], 8, 3)


def test_a_pooling_without_the_prompt_trains_with_prompts_as_sentence_transformers_encodes(base, tmp_path):
    """include_prompt false: the prompted column's embeddings in training leave the prompt's tokens out of the
    mean exactly as sentence-transformers' encode(prompt=...) does; the command trains such a model with prompts
    and the saved directory keeps both the prompts and include_prompt false."""
    st = pytest.importorskip("sentence_transformers")
    from sentence_transformers.sentence_transformer import modules

    reference = st.SentenceTransformer(modules=[modules.Transformer(str(base), max_seq_length=32),
                                                modules.Pooling(36, pooling_mode="mean", include_prompt=False)],
                                       device="cpu")
    reference.save(str(tmp_path / "st"))
    net = SentenceTransformer(tmp_path / "st", optimize=False)
    assert not net.pooling.include_prompt
    rows = [{"anchor": "w1 w2 w3", "positive": "w4 w5"}, {"anchor": "w6", "positive": "w7 w8 w9 w10"}]
    batch = PairCollator(net.tokenizer, prompts={"anchor": "w50 w51 ", "positive": "w52 "})(
        RowBatch("rows", rows, ["row 1", "row 2"]))
    module = BiEncoder(net, MultipleNegativesRankingLoss())
    with torch.no_grad():
        for column, prompt in (("anchor", "w50 w51 "), ("positive", "w52 ")):
            ours = module.embed(batch.inputs[batch.columns.index(column)])
            expected = reference.encode([r[column] for r in rows], prompt=prompt, convert_to_tensor=True)
            torch.testing.assert_close(ours, expected, rtol=1e-5, atol=1e-6)
            with_prompt = net(**{k: v for k, v in batch.inputs[batch.columns.index(column)].items()
                                 if k != "prompt_length"})
            assert not torch.allclose(with_prompt, expected, atol=1e-4)  # the prompt's tokens do count otherwise

    train = write_pairs(tmp_path / "pairs.jsonl", 16)
    result = finetune_embeddings(tmp_path / "st", train, tmp_path / "run", max_steps=2, query_prompt="w50 ",
                                 document_prompt="w52 ", **COMMON)
    saved = SentenceTransformer(result.model_dir)
    assert saved.prompts["query"] == "w50 " and not saved.pooling.include_prompt


def test_sigkill_after_a_checkpoint_then_resume_is_bit_identical(tmp_path):
    """``bertkit finetune embed`` in a subprocess, SIGKILLed once its first checkpoint is on disk, then run again
    with --resume: the model equals the uninterrupted run's byte for byte (dropout on, so the RNG state counts)."""
    import sys

    from conftest import kill_when
    from test_cli_runs import bertkit

    base = write_base(tmp_path / "base", dropout=0.1)
    train = write_pairs(tmp_path / "pairs.jsonl", 96)
    args = ["finetune", "embed", "--model", base, "--train", train, "--batch-size", 8, "--max-steps", 10,
            "--save-every", 2, "--seed", 5, "--precision", "fp32", "--device", "cpu", "--loss", "cached-mnrl",
            "--mini-batch-size", 3]
    whole, killed = tmp_path / "whole", tmp_path / "killed"
    bertkit(*args, "-o", whole)
    first = killed / "checkpoints" / "step-00000002"
    kill_when([sys.executable, "-m", "bertkit.cli", *map(str, args), "-o", str(killed)], first)
    assert first.exists() and not (killed / "model").exists(), "the run ended before it could be killed"
    resumed = bertkit(*args, "-o", killed, "--resume")
    assert "resumed from" in resumed.stderr
    assert (killed / "model" / "model.safetensors").read_bytes() == (whole / "model" / "model.safetensors").read_bytes()
    logged = [json.loads(line)["step"] for line in (killed / "metrics.jsonl").read_text().splitlines()
              if json.loads(line)["split"] == "train"]
    assert logged == sorted(set(logged)) and logged[-1] == 10


def as_started_before_issue_39(run_dir, batch_size: int, accumulation: int) -> None:
    """Make ``run_dir`` look as the old meaning wrote it: run.json's batch size per step and process, no
    ``batch_size_counts``, and the Trainer's config counting batches (``examples_seen`` too)."""
    info = json.loads((run_dir / "run.json").read_text())
    info["embedding"]["batch_size"] = batch_size // accumulation
    del info["embedding"]["batch_size_counts"]
    info["training"]["batch_size"] = accumulation
    (run_dir / "run.json").write_text(json.dumps(info))
    for state_file in run_dir.glob("checkpoints/*/state.pt"):
        state = torch.load(state_file, weights_only=True)
        state["config"]["batch_size"] = accumulation
        state["trainer"]["examples_seen"] = state["trainer"]["step"] * accumulation
        torch.save(state, state_file)


def test_batch_size_counts_rows_per_step_and_a_run_of_the_old_meaning_is_converted_or_refused(base, tmp_path):
    """--batch-size 8 with 2 accumulation steps: micro-batches of 4 rows, ``examples_seen`` 8 rows a step. A run
    started when --batch-size 4 meant 4 rows per micro-batch and process is refused with the flag that resumes it,
    then converted by it: it ends with the weights of the run never cut."""
    train = write_pairs(tmp_path / "pairs.jsonl", 48)
    options = {**COMMON, "loss": "mnrl", "max_steps": 6, "save_every": 2, "gradient_accumulation_steps": 2}
    whole = finetune_embeddings(base, train, tmp_path / "whole", **options)
    state = torch.load(next((tmp_path / "whole").glob("checkpoints/*/state.pt")), weights_only=True)
    assert state["trainer"]["examples_seen"] == 6 * 8 and state["config"]["batch_size"] == 8

    def stop(trainer):
        if trainer.state.step == 2:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        finetune_embeddings(base, train, tmp_path / "old", callbacks={"on_save": stop}, **options)
    as_started_before_issue_39(tmp_path / "old", 8, 2)
    with pytest.raises(ValueError, match=r"was started when --batch-size counted the rows per step and process \(4, "
                                         r"x 1 process\(es\) x 2 .*: resume with --batch-size 8\.$") as info:
        finetune_embeddings(base, train, tmp_path / "old", resume=True, **{**options, "batch_size": 4})
    assert "\n" not in str(info.value)
    resumed = finetune_embeddings(base, train, tmp_path / "old", resume=True, **options)
    assert json.loads((tmp_path / "old" / "run.json").read_text())["embedding"]["batch_size"] == 8
    ours, theirs = (load_file(r.model_dir / "model.safetensors") for r in (resumed, whole))
    for name in theirs:
        torch.testing.assert_close(ours[name], theirs[name], rtol=0, atol=0, msg=name)


def test_the_command_says_what_batch_size_counts_once_and_how_the_batch_splits(base, tmp_path, capsys):
    train = write_pairs(tmp_path / "pairs.jsonl", 16)
    common = ["finetune", "embed", "--model", str(base), "--train", str(train), "--max-steps", "1", "--precision",
              "fp32", "--device", "cpu", "--threads", "1"]
    assert cli([*common, "-o", str(tmp_path / "a"), "--batch-size", "8", "--gradient-accumulation-steps", "2"]) == 0
    err = capsys.readouterr().err
    assert err.count("--batch-size counts the rows of one optimizer step over all processes") == 1
    assert "batch size 8 rows per optimizer step = 4 per micro-batch and process x 1 process x 2 accumulation " \
           "steps" in err
    assert cli([*common, "-o", str(tmp_path / "b")]) == 0  # the default: nothing to say about the flag
    assert "--batch-size counts" not in capsys.readouterr().err


def test_dataloader_workers_tokenize_the_batches_and_train_as_the_process_does(base, tmp_path):
    """The dataset is the Trainer's batch source: with num_workers the batches are tokenized in the workers, and
    the cached loss trains to the same weights, bit for bit."""
    from bertkit.training import TrainingConfig

    train = write_pairs(tmp_path / "pairs.jsonl", 32)
    weights = []
    for workers in (0, 2):
        config = TrainingConfig(max_steps=3, batch_size=8, learning_rate=1e-3, precision="fp32", device="cpu",
                                threads=1, progress_bar=False, num_workers=workers)
        result = finetune_embeddings(base, train, tmp_path / f"w{workers}", config, loss="cached-mnrl",
                                     mini_batch_size=3)
        weights.append(load_file(result.model_dir / "model.safetensors"))
    for name in weights[0]:
        torch.testing.assert_close(weights[1][name], weights[0][name], rtol=0, atol=0, msg=name)
