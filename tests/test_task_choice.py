"""The choice task (multiple choice): training and validation data need a label on every row, predicting none."""

from __future__ import annotations

import csv
import json

from bertkit.tasks.multiple_choice import MultipleChoice
from task_helpers import model_dir, refused


def _swag(path, labels) -> str:
    """A SWAG-layout CSV with one row per label ("" for a row without one; None: no label column)."""
    rows = [{"sent1": f"the sky is blue {i}", "sent2": "so it is", "ending0": "blue", "ending1": "red",
             **({"label": label} if label is not None else {})} for i, label in enumerate(labels)]
    with open(path, "w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    return str(path)


def test_a_training_row_without_a_label_is_refused_naming_file_line_and_column(tmp_path):
    train = _swag(tmp_path / "train.csv", [0, 1, 0, "", 1, 0])
    refused(tmp_path, r"train\.csv, line 5: no gold label \(column 'label'.*\), though 5 other example\(s\) have one",
            task="choice", train=train)
    lines = tmp_path / "train.jsonl"
    lines.write_text("".join(json.dumps({"context": "c", "choices": ["a", "b"], **extra}) + "\n"
                             for extra in ({"label": 0}, {"answer": "b"}, {}, {"label": 1})))
    refused(tmp_path, r"train\.jsonl, line 3: no gold label \(column 'label'", task="choice", train=lines)


def test_a_file_without_the_label_column_is_refused_for_training_and_validation(tmp_path):
    refused(tmp_path, r"train\.csv has no gold labels \(column 'label'", task="choice",
            train=_swag(tmp_path / "train.csv", [None] * 4))
    refused(tmp_path, r"dev\.csv has no gold labels \(column 'label'.*unlabelled data can go to --test", task="choice",
            train=_swag(tmp_path / "train.csv", [0, 1, 0, 1]), validation=_swag(tmp_path / "dev.csv", [None] * 2))


def test_unlabelled_data_is_still_predicted(tmp_path):
    from bertkit.tasks.finetuning import finetune, predict

    result = finetune("choice", model_dir(), _swag(tmp_path / "train.csv", [0, 1, 0, 1]),
                      test=_swag(tmp_path / "test.csv", [None] * 3), output_dir=tmp_path / "out", epochs=1,
                      batch_size=2, max_seq_length=32, progress=False)
    assert len((tmp_path / "out" / "predictions_test.jsonl").read_text().splitlines()) == 3
    assert "test" not in result.results  # unlabelled: predicted, not scored
    unlabelled = _swag(tmp_path / "new.csv", ["", "", ""])
    assert all(e.label is None for e in MultipleChoice().read(unlabelled))
    predictions = predict(result.model_dir, unlabelled, tmp_path / "p.jsonl")
    assert len(predictions) == 3 and all(p["label"] in (0, 1) for p in predictions)
