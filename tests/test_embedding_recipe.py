"""The embedding recipe of docs/how-to/train-embeddings.md, line by line as written there (``$BASE`` a tiny
sentence-transformers model, ``pairs.jsonl`` and ``beir`` made here): mine -> train a bi-encoder and a reranker ->
evaluate both; the serve line is checked to name a directory the server loads (serving itself is tested in
tests/test_serve*.py)."""

from __future__ import annotations

import json
import random
import re
import shlex
from pathlib import Path

import pytest

from bertkit.cli import main as cli
from test_embedding_eval import WORDS, tiny_sentence_transformer, write_beir

PAGE = Path(__file__).resolve().parent.parent / "docs" / "how-to" / "train-embeddings.md"


def recipe_lines() -> list[str]:
    text = PAGE.read_text(encoding="utf-8")
    start = text.index("The recipe end to end, as it runs")
    block = re.search(r"```bash\n(.*?)```", text[start:], re.S).group(1)
    return [line.split("#")[0].strip() for line in block.splitlines() if line.strip()]


def test_the_docs_recipe_runs_as_written(tmp_path, monkeypatch, capsys):
    base = tiny_sentence_transformer(tmp_path / "base")
    write_beir(tmp_path / "beir", documents=30, queries=8)
    rng = random.Random(0)
    with open(tmp_path / "pairs.jsonl", "w") as f:
        for _ in range(40):
            query = rng.sample(WORDS, 3)
            f.write(json.dumps({"anchor": " ".join(query), "positive": " ".join(query + rng.sample(WORDS, 3))}) + "\n")
    monkeypatch.chdir(tmp_path)
    lines = recipe_lines()
    assert [line.split()[1] for line in lines] == ["embed", "finetune", "finetune", "evaluate", "evaluate", "serve"]
    for line in lines[:-1]:
        argv = shlex.split(line.replace("$BASE", str(base)))
        assert argv[0] == "bertkit"
        extra = ["--device", "cpu"] if argv[1] == "finetune" else []
        assert cli(argv[1:] + extra) == 0, (line, capsys.readouterr().err)

    mined = [json.loads(row) for row in (tmp_path / "mined.jsonl").read_text().splitlines()]
    assert mined and all({"anchor", "positive", "negative_1", "negative_2", "negative_3"} <= set(r) for r in mined)
    for run in ("embed-run", "rerank-run"):
        results = json.loads((tmp_path / run / "results.json").read_text())
        assert results["evaluation"]["final"] and (tmp_path / run / "model" / "README.md").is_file()
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
