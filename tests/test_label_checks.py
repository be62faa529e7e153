"""Labels are checked while the training data is read, before the run directory opens, naming the file and line
(issue 38): what the loss needs of them (0 or 1, within [0, 1], one per passage), and NaN / infinite scores said
as not finite (not as text)."""

from __future__ import annotations

import json

import pytest

from bertkit.sentence.data import EmbeddingDataset, file_layout, training_rows
from bertkit.sentence.rerank_training import finetune_reranker
from bertkit.sentence.training import finetune_embeddings
from bertkit.tasks.finetuning import finetune


def jsonl(path, records):
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


def pairs(labels):
    return [{"anchor": f"query {i}", "positive": f"passage {i}", "label": label} for i, label in enumerate(labels)]


@pytest.mark.parametrize("text, line, value", [
    ("anchor,positive,score\na,b,nan\nc,d,nan\n", 2, "'nan'"),         # every sampled score NaN
    ("anchor,positive,score\na,b,0.5\nc,d,inf\n", 3, "'inf'"),
    ("q,d,s\na,b,0.5\nc,d,nan\n", 3, "'nan'"),                         # a label by position
])
def test_a_score_that_is_not_finite_is_said_so_with_its_line(tmp_path, text, line, value):
    path = tmp_path / "scores.csv"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ValueError, match=rf"^{path}, line {line}: the label '(score|s)' is {value}, which is not "
                                         "finite; write a finite number or drop the row\\.$"):
        list(training_rows(path, file_layout(path)))


def test_a_json_nan_label_is_not_finite(tmp_path):
    path = tmp_path / "scores.jsonl"
    path.write_text('{"anchor": "a", "positive": "b", "score": 0.5}\n{"anchor": "c", "positive": "d", "score": NaN}\n')
    with pytest.raises(ValueError, match=r"scores\.jsonl, line 2: the label 'score' is nan, which is not finite"):
        list(training_rows(path, file_layout(path)))


def test_a_label_the_loss_cannot_use_fails_when_the_dataset_opens(tmp_path):
    from bertkit.sentence.training import label_rule  # new with the check (imported here: the others run without)

    path = jsonl(tmp_path / "pairs.jsonl", pairs([1, 0, -3.0, 1]))
    with pytest.raises(ValueError, match=rf"^{path}, line 3: the label -3\.0 is not 0 or 1, which --loss contrastive "
                                         r"needs; fix the label or choose another loss\.$"):
        EmbeddingDataset(path, 2, check=label_rule("contrastive"))
    assert len(EmbeddingDataset(path, 2, check=label_rule("cosent"))) == 2  # any finite score


def test_finetune_embed_refuses_the_label_before_the_run_directory(tmp_path):
    path = jsonl(tmp_path / "pairs.jsonl", pairs([1, 0, 0.5, 1]))
    run = tmp_path / "run"
    with pytest.raises(ValueError, match=r"pairs\.jsonl, line 3: the label 0\.5 is not 0 or 1, which --loss "
                                         "online-contrastive needs"):
        finetune_embeddings(tmp_path / "no-model-is-loaded", path, run, loss="online-contrastive", progress=False)
    assert not run.exists()


@pytest.mark.parametrize("labels, message", [
    ([1.0, -3.0], r"line 2: the label -3\.0 is not in \[0, 1\], which --loss bce needs"),
    ([1.0, [1.0, 0.0, 0.0]], r"line 2: 3 label\(s\) for 2 passage\(s\); give one score per passage"),
])
def test_finetune_rerank_refuses_the_label_before_the_run_directory(tmp_path, labels, message):
    rows = [{"query": f"q{i}", "positive": f"p{i}", "negative": f"n{i}", "label": label if isinstance(label, list)
             else [label, 0.0]} for i, label in enumerate(labels)]
    path = jsonl(tmp_path / "rerank.jsonl", rows)
    run = tmp_path / "run"
    with pytest.raises(ValueError, match=rf"rerank\.jsonl, {message}"):
        finetune_reranker(tmp_path / "no-model-is-loaded", path, run, loss="bce", progress=False)
    assert not run.exists()


def test_finetune_classify_refuses_a_nan_regression_label_before_the_run_directory(tmp_path):
    path = tmp_path / "train.csv"
    path.write_text("text,label\ngood,0.5\nbad,nan\nfine,1.5\n", encoding="utf-8")
    run = tmp_path / "run"
    with pytest.raises(ValueError, match=r"train\.csv, line 3: the label 'nan' is not finite; regression needs a "
                                         "finite number"):
        finetune("classify", tmp_path / "no-model-is-loaded", path, output_dir=run, progress=False)
    assert not run.exists()
