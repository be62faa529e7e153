"""A model whose scoring head would be random is refused where a trained one is needed (issue 38), naming the flag
and what it needs: ``embed mine --rescore`` and ``serve --task rerank|classify`` with a bi-encoder or a base
checkpoint, ``finetune embed --guide`` with a cross-encoder. The models that fit are taken as before."""

from __future__ import annotations

import json

import pytest

from bertkit.cli import main as cli
from bertkit.sentence import SentenceTransformer
from bertkit.serving.settings import resolve_task
from test_embedding_training import COMMON, write_base, write_pairs
from test_rerank_training import write_base as write_cross_encoder


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("heads")
    base = write_base(root / "base", dropout=0.0)  # a plain BertModel checkpoint
    bi = SentenceTransformer(base, optimize=False).save(root / "bi")
    return {"base": base, "bi": bi, "cross": write_cross_encoder(root / "cross", dropout=0.0)}


def test_serving_a_model_without_a_trained_classifier_for_rerank_or_classify_is_refused(models):
    with pytest.raises(ValueError, match=r"--task rerank: .*bi holds an embedding model \(a bi-encoder\) and no "
                                         r"trained scoring head: .*initialised at random\. Give a cross-encoder"):
        resolve_task(models["bi"], "rerank")
    with pytest.raises(ValueError, match=r"--task classify: .*base holds a BERT\w* and no trained scoring head"):
        resolve_task(models["base"], "classify")
    assert resolve_task(models["cross"], "rerank") == "rerank"
    assert resolve_task(models["bi"], "embeddings") == "embeddings"


def test_mining_rescored_by_a_bi_encoder_is_refused(models, tmp_path, capsys):
    data = write_pairs(tmp_path / "pairs.jsonl", 12)
    argv = ["embed", "mine", str(models["bi"]), "--data", str(data), "-o", str(tmp_path / "mined.jsonl"),
            "--num-negatives", "1", "--device", "cpu"]
    assert cli([*argv, "--rescore", str(models["bi"])]) == 1
    assert "--rescore" in capsys.readouterr().err and not (tmp_path / "mined.jsonl").exists()
    assert cli([*argv, "--rescore", str(models["cross"])]) == 0


def test_a_cross_encoder_as_the_guide_is_refused(models, tmp_path):
    from bertkit.sentence.training import finetune_embeddings

    train = write_pairs(tmp_path / "pairs.jsonl", 16)
    with pytest.raises(ValueError, match=r"--guide .*cross is a cross-encoder \(a reranker\).*Give an embedding "
                                         "model"):
        finetune_embeddings(models["bi"], train, tmp_path / "run", loss="gist", guide=models["cross"], max_steps=1,
                            **COMMON)
    result = finetune_embeddings(models["bi"], train, tmp_path / "run", loss="gist", guide=models["bi"], max_steps=1,
                                 **COMMON)  # the refused run left nothing that blocks this one
    assert json.loads((result.output_dir / "results.json").read_text())["steps"] == 1
