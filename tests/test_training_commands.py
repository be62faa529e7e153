"""What ``finetune embed`` and ``finetune rerank`` promise whatever the model and the data (issue 38).

Checked: the same seeded command writes the same model bytes, from a checkpoint without a pooler too (the
pooler no loss reads is initialised from the seed); a run that failed on its data before its first step (after
its step-0 evaluation) does not block the corrected command, and run.json names the run's directory after an
--overwrite; every flag an error message names is one the command has (--encoding for a file that is not
UTF-8, --apply-changes for a resume with other hyperparameters), and following the message works.
"""

from __future__ import annotations

import json
import re

import pytest
import torch

from bertkit.cli import main as cli
from bertkit.sentence.rerank_training import finetune_reranker
from bertkit.sentence.training import finetune_embeddings
from test_embedding_training import COMMON, WORDS, write_pairs

TRAINERS = {"embed": finetune_embeddings, "rerank": finetune_reranker}


@pytest.fixture(scope="module")
def mlm_base(tmp_path_factory):
    """A tiny HF BertForMaskedLM: a checkpoint with no pooler and no classifier."""
    from transformers import BertConfig, BertForMaskedLM

    directory = tmp_path_factory.mktemp("mlm")
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *WORDS]
    torch.manual_seed(0)
    config = BertConfig(vocab_size=len(vocab), hidden_size=36, num_hidden_layers=2, num_attention_heads=3,
                        intermediate_size=37, max_position_embeddings=40, hidden_dropout_prob=0.0,
                        attention_probs_dropout_prob=0.0)
    BertForMaskedLM(config).save_pretrained(directory)
    (directory / "vocab.txt").write_text("\n".join(vocab) + "\n")
    (directory / "tokenizer_config.json").write_text(json.dumps({"do_lower_case": True}))
    return directory


def _files(directory):
    return {p.relative_to(directory).as_posix(): p.read_bytes() for p in sorted(directory.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("command", sorted(TRAINERS))
def test_the_same_seeded_run_writes_the_same_bytes_from_a_checkpoint_without_a_pooler(command, mlm_base,
                                                                                       tmp_path):
    train = write_pairs(tmp_path / "pairs.jsonl", 16)
    runs = [TRAINERS[command](mlm_base, train, tmp_path / name, max_steps=2, seed=3, **COMMON)
            for name in ("first", "second")]
    first, second = (_files(run.model_dir) for run in runs)
    assert "model.safetensors" in first
    assert first == second


def test_a_run_that_failed_on_its_data_before_its_first_step_does_not_block_the_corrected_command(mlm_base,
                                                                                                   tmp_path):
    sts = tmp_path / "sts.csv"
    sts.write_text("sentence1,sentence2,score\nw1 w2,w1 w3,0.5\nw4 w5,w4 w5,1.0\nw6,w7,0.0\n")
    repeated = tmp_path / "repeated.jsonl"  # one query with two positives in a batch: refused at the first batch
    repeated.write_text("".join(json.dumps({"anchor": "w1 w2", "positive": f"w{i + 3}"}) + "\n" for i in range(16)))
    out = tmp_path / "run"
    with pytest.raises(ValueError, match="comes with two different positives in one batch"):
        finetune_embeddings(mlm_base, repeated, out, max_steps=2, eval_sts=sts, **COMMON)
    assert (out / "metrics.jsonl").exists()  # its step-0 evaluation
    train = write_pairs(tmp_path / "pairs.jsonl", 16)
    result = finetune_embeddings(mlm_base, train, out, max_steps=2, eval_sts=sts, **COMMON)
    assert result.results["steps"] == 2
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [(r["split"], r["step"]) for r in records] == [("eval", 0), ("train", 1), ("train", 2), ("eval", 2)]


def test_run_json_names_the_run_directory_after_an_overwrite(mlm_base, tmp_path):
    train = write_pairs(tmp_path / "pairs.jsonl", 16)
    out = tmp_path / "run"
    finetune_embeddings(mlm_base, train, out, max_steps=1, **COMMON)
    finetune_embeddings(mlm_base, train, out, max_steps=1, overwrite=True, **COMMON)
    assert json.loads((out / "run.json").read_text())["training"]["output_dir"] == str(out.absolute())


def _flags(command: list[str], capsys) -> set[str]:
    """The flags ``command --help`` lists."""
    with pytest.raises(SystemExit):
        cli([*command, "--help"])
    lines = capsys.readouterr().out.splitlines()
    return {flag for line in lines if (m := re.match(r"\s+(-.*?)(?:\s{2,}|$)", line))
            for flag in re.findall(r"--[a-z][\w-]*", m.group(1))}


def _refused(argv: list[str], capsys) -> str:
    assert cli(argv) == 1
    return capsys.readouterr().err


@pytest.mark.parametrize("command", sorted(TRAINERS))
def test_every_flag_an_error_names_is_one_the_command_has(command, mlm_base, tmp_path, capsys):
    flags = _flags(["finetune", command], capsys)
    train = tmp_path / "latin1.jsonl"
    with open(train, "w", encoding="latin-1") as f:
        for i in range(16):
            f.write(json.dumps({"query": f"w{i} café", "positive": f"w{i} crème", "negative": "w1 w2"},
                               ensure_ascii=False) + "\n")
    out = tmp_path / "run"
    argv = ["finetune", command, "--model", str(mlm_base), "--train", str(train), "-o", str(out), "--batch-size",
            "8", "--precision", "fp32", "--device", "cpu", "--threads", "1", "--learning-rate", "1e-3",
            "--max-steps", "2"]

    message = _refused(argv, capsys)
    assert "--encoding" in message
    assert set(re.findall(r"--[a-z][\w-]*", message)) <= flags, message
    argv += ["--encoding", "latin-1"]
    assert cli(argv) == 0  # as the message says

    changed = [*argv[:-6], "--learning-rate", "2e-3", "--max-steps", "3", "--encoding", "latin-1", "--resume"]
    message = _refused(changed, capsys)
    assert "--apply-changes" in message
    assert set(re.findall(r"--[a-z][\w-]*", message)) <= flags, message
    assert cli([*changed, "--apply-changes"]) == 0
    assert json.loads((out / "results.json").read_text())["steps"] == 3


#: command -> (its data flag, a file of that kind holding one latin-1 byte)
LATIN1_DATA = {
    ("finetune", "classify"): ("--train", "train.tsv", "text\tlabel\ncaf\xe9\tpos\nthe\tneg\n"),
    ("finetune", "tag"): ("--train", "train.conll", "caf\xe9 B-PER\nthe O\n"),
    ("finetune", "qa"): ("--train", "train.json", json.dumps({"version": "v2.0", "data": [{"title": "t", "paragraphs": [
        {"context": "caf\xe9 au lait", "qas": [{"id": "1", "question": "what?", "is_impossible": False,
                                                 "answers": [{"text": "lait", "answer_start": 8}]}]}]}]},
                                                  ensure_ascii=False)),
    ("finetune", "choice"): ("--train", "train.csv", "sent1,sent2,ending0,ending1,label\ncaf\xe9,x,a,b,0\n"),
    ("finetune", "embed"): ("--train", "pairs.csv", "anchor,positive\ncaf\xe9,w1\nw2,w3\n"),
    ("finetune", "rerank"): ("--train", "pairs.csv", "query,positive,negative\ncaf\xe9,w1,w2\nw2,w3,w4\n"),
    ("pretrain",): ("--text", "book.txt", "caf\xe9 " * 50),
}


@pytest.mark.parametrize("command", sorted(LATIN1_DATA), ids=" ".join)
def test_every_training_command_has_the_encoding_flag_its_decoding_error_names(command, mlm_base, tmp_path,
                                                                                capsys):
    flag, name, text = LATIN1_DATA[command]
    data = tmp_path / name
    data.write_bytes(text.encode("latin-1"))
    model = [] if command == ("pretrain",) else ["--model", str(mlm_base)]  # pretrain: a new tiny model
    message = _refused([*command, *model, flag, str(data), "-o", str(tmp_path / "run")], capsys)
    assert "--encoding" in message and name in message, message
    assert set(re.findall(r"--[a-z][\w-]*", message)) <= _flags(list(command), capsys), message


def _beir(directory):
    """A BEIR directory of two queries, q1 judged, and a run file that ranks only q2."""
    (directory / "qrels").mkdir(parents=True)
    (directory / "corpus.jsonl").write_text('{"_id": "d1", "text": "w1 w2"}\n')
    (directory / "queries.jsonl").write_text('{"_id": "q1", "text": "w1"}\n{"_id": "q2", "text": "w2"}\n')
    (directory / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\n")
    (directory / "run.trec").write_text("q2 Q0 d1 1 1.0 run\n")
    return directory


@pytest.mark.parametrize("case", ["rows", "first stage"])
def test_an_evaluation_file_error_names_the_flag_of_the_training_command(case, mlm_base, tmp_path, capsys):
    flags = _flags(["finetune", "rerank"], capsys)
    (tmp_path / "empty.jsonl").write_text("")
    beir = _beir(tmp_path / "beir")
    train = write_pairs(tmp_path / "pairs.jsonl", 16)
    given, named, why = {"rows": (["--eval-rerank", str(tmp_path / "empty.jsonl")], "--eval-rerank", "holds no rows"),
                         "first stage": (["--eval-beir", str(beir), "--eval-first-stage", str(beir / "run.trec")],
                                         "--eval-first-stage", "ranks none of the 1 judged queries")}[case]
    message = _refused(["finetune", "rerank", "--model", str(mlm_base), "--train", str(train), "-o",
                        str(tmp_path / "run"), *given], capsys)
    assert named in message and why in message
    assert set(re.findall(r"--[a-z][\w-]*", message)) <= flags, message


def test_a_stale_torchrun_environment_fails_soon_naming_the_variables(monkeypatch):
    """WORLD_SIZE / RANK left in a shell make a plain run a process of a job whose other processes never come."""
    import socket

    import torch.distributed as dist

    from bertkit.training.distributed import init_distributed

    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
    for name, value in dict(WORLD_SIZE="2", RANK="0", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
                            BERTKIT_JOIN_TIMEOUT="1").items():
        monkeypatch.setenv(name, value)
    with pytest.raises(ValueError, match=r"WORLD_SIZE=2 and RANK=0 are set in the environment.* did not come within "
                                         r"1 s .*unset WORLD_SIZE RANK .*BERTKIT_JOIN_TIMEOUT"):
        init_distributed("cpu")
    assert not dist.is_initialized()
    monkeypatch.delenv("MASTER_PORT")
    with pytest.raises(ValueError, match="but MASTER_PORT is not"):
        init_distributed("cpu")
    monkeypatch.setenv("BERTKIT_JOIN_TIMEOUT", "soon")
    with pytest.raises(ValueError, match="BERTKIT_JOIN_TIMEOUT='soon' is not a number of seconds"):
        init_distributed("cpu")
