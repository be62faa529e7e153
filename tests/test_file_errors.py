"""One error policy: every error that comes from a file names it (and the line, byte or key), as one
``bertkit: error: ...`` line."""

from __future__ import annotations

import json

import pytest

from bertkit import BERT, BERTConfig
from bertkit.cli import main
from bertkit.io import read_json, read_json_object
from conftest import SPECIAL, TINY


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    """A tiny backbone saved with a vocabulary (and a tokenizer config, so loading is quiet)."""
    folder = tmp_path_factory.mktemp("model")
    BERT(BERTConfig(**TINY, **SPECIAL)).save_pretrained(folder)
    words = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + [f"w{i}" for i in range(5, TINY["vocab_size"])]
    (folder / "vocab.txt").write_text("\n".join(words) + "\n", encoding="utf-8")
    (folder / "tokenizer_config.json").write_text('{"do_lower_case": true}', encoding="utf-8")
    return folder


def copy_of(model_dir, tmp_path, name="copy"):
    folder = tmp_path / name
    folder.mkdir()
    for file in model_dir.iterdir():
        (folder / file.name).write_bytes(file.read_bytes())
    return folder


def error_line(capsys, *argv) -> str:
    """The one ``bertkit: error:`` line of a CLI run that fails with status 1."""
    assert main([str(a) for a in argv]) == 1
    lines = capsys.readouterr().err.strip().splitlines()
    assert lines[-1].startswith("bertkit: error: "), lines
    return lines[-1]


# ---------------------------------------------------------------------------- JSON files

def test_read_json_names_file_line_and_column(tmp_path):
    path = tmp_path / "settings.json"
    path.write_text('{"a": 1,\n  "b": }\n', encoding="utf-8")
    with pytest.raises(ValueError, match=rf"^{path} is not valid JSON \(Expecting value: line 2, column 8\); it "
                                         "should hold my settings"):
        read_json(path, "my settings")
    path.write_bytes(b'{"a": "\xff"}')
    with pytest.raises(ValueError, match=rf"^{path} is not UTF-8 text \(at byte 7"):
        read_json(path)
    path.write_text("[1]", encoding="utf-8")
    assert read_json(path) == [1]
    with pytest.raises(ValueError, match=rf"^{path} holds a JSON array, not a JSON object"):
        read_json_object(path)
    with pytest.raises(ValueError, match="is a directory"):
        read_json(tmp_path)


def test_corrupt_task_json_names_the_file(model_dir, tmp_path, capsys):
    folder = copy_of(model_dir, tmp_path)
    (folder / "task.json").write_text('{"task": "classify",\n', encoding="utf-8")
    data = tmp_path / "rows.csv"
    data.write_text("text,label\nw5 w6,a\n", encoding="utf-8")
    line = error_line(capsys, "predict", folder, "--data", data, "-o", tmp_path / "p.jsonl")
    assert f"{folder / 'task.json'} is not valid JSON (" in line and "line 2, column 1" in line
    (folder / "task.json").write_text('{"options": {}}', encoding="utf-8")
    line = error_line(capsys, "predict", folder, "--data", data, "-o", tmp_path / "p.jsonl")
    assert f"{folder / 'task.json'}: 'task' missing" in line


def test_invalid_config_json_names_the_file_for_embed_and_convert(model_dir, tmp_path, capsys):
    folder = copy_of(model_dir, tmp_path)
    config = folder / "config.json"
    texts = tmp_path / "texts.txt"
    texts.write_text("w5 w6\n", encoding="utf-8")
    config.write_text('{"hidden_size": \n', encoding="utf-8")
    line = error_line(capsys, "embed", folder, "--input", texts, "-o", tmp_path / "e.npy")
    assert f"{config} is not valid JSON (Expecting value: line 2, column 1)" in line
    config.write_text((model_dir / "config.json").read_text(encoding="utf-8")[:60], encoding="utf-8")  # truncated
    line = error_line(capsys, "convert", folder, tmp_path / "converted")
    assert f"{config} is not valid JSON (" in line


def test_damaged_tokenizer_settings_name_the_file(model_dir, tmp_path, capsys):
    folder = copy_of(model_dir, tmp_path)
    (folder / "tokenizer_config.json").write_text("{", encoding="utf-8")
    line = error_line(capsys, "fill-mask", folder, "w5 [MASK] w6")
    assert f"{folder / 'tokenizer_config.json'} is not valid JSON" in line


# ---------------------------------------------------------------------------- paths

def test_output_that_is_a_directory_is_named_not_the_temp_file(model_dir, tmp_path, capsys):
    texts = tmp_path / "texts.txt"
    texts.write_text("w5 w6\n", encoding="utf-8")
    out = tmp_path / "answers"
    out.mkdir()
    line = error_line(capsys, "predict", "embeddings", model_dir, "--input", texts, "-o", out)
    assert f"cannot write {out}: it is a directory" in line and ".tmp" not in line
    assert list(out.iterdir()) == [] and sorted(p.name for p in tmp_path.iterdir()) == ["answers", "texts.txt"]


def test_weights_symlinked_to_themselves_are_named_as_a_link_loop(model_dir, tmp_path, capsys):
    folder = copy_of(model_dir, tmp_path)
    (folder / "model.safetensors").unlink()
    (folder / "model.safetensors").symlink_to("model.safetensors")
    texts = tmp_path / "texts.txt"
    texts.write_text("w5 w6\n", encoding="utf-8")
    line = error_line(capsys, "embed", folder, "--input", texts, "-o", tmp_path / "e.npy")
    assert f"{folder / 'model.safetensors'} is a symbolic link that cannot be resolved" in line
    assert "link loop" in line
    (folder / "model.safetensors").unlink()
    (folder / "model.safetensors").symlink_to("gone.safetensors")
    line = error_line(capsys, "embed", folder, "--input", texts, "-o", tmp_path / "e.npy")
    assert f"{folder / 'model.safetensors'} is a symbolic link to 'gone.safetensors', which does not exist" in line


# ---------------------------------------------------------------------------- bertkit info

def test_info_on_a_file_that_is_no_model_says_what_info_takes(tmp_path, capsys):
    afile = tmp_path / "afile"
    afile.write_text("not a model\n", encoding="utf-8")
    line = error_line(capsys, "info", afile)
    assert f"{afile} is a file but not a model config" in line and "info takes a size" in line
    assert "Unknown model size" not in line
    assert "info takes a size" in error_line(capsys, "info", tmp_path / "missing")
    assert "directory without a config.json" in error_line(capsys, "info", tmp_path)


@pytest.mark.parametrize("content", ['{}', '{"version": "v2.0", "data": [{"title": "Emma", "paragraphs": []}]}',
                                     '{"hidden_size": 64}'])
def test_info_on_json_that_is_no_config_names_the_file_and_what_a_config_gives(tmp_path, capsys, content):
    """SQuAD data and {} were described as BERT-base (every field has a default)."""
    path = tmp_path / "train-v2.0.json"
    path.write_text(content, encoding="utf-8")
    line = error_line(capsys, "info", path)
    assert f"{path} is JSON but not a model config: it lacks " in line and "num_hidden_layers" in line
    assert "which a config gives" in line and "info takes a size" in line


@pytest.mark.parametrize("model_type, family", [(None, "family=bert"), ("roberta", "family=roberta"),
                                                ("xlm-roberta", "family=roberta (xlm-roberta)"),
                                                ("mpnet", "family=mpnet"), ("distilbert", "family=distilbert")])
def test_info_names_the_family(tmp_path, capsys, model_type, family):
    config = {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2, "intermediate_size": 37,
              "vocab_size": 99, "max_position_embeddings": 64}
    if model_type == "distilbert":
        config = {"dim": 32, "n_layers": 2, "n_heads": 2, "hidden_dim": 37, "vocab_size": 99}
    if model_type is not None:
        config["model_type"] = model_type
    (tmp_path / "config.json").write_text(json.dumps(config), encoding="utf-8")
    assert main(["info", str(tmp_path)]) == 0
    assert capsys.readouterr().out.startswith(f"{tmp_path}: {family} L=2 H=32 ")
    assert main(["info", "tiny"]) == 0
    assert capsys.readouterr().out.startswith("tiny: family=bert L=")


def test_export_refuses_an_unsupported_opset_naming_the_range(model_dir, tmp_path, capsys):
    from bertkit.export.exporters import max_opset

    line = error_line(capsys, "export", model_dir, "-o", tmp_path / "onnx", "--opset", "99")
    assert f"opset 99 is not supported: this installation exports opsets 17 to {max_opset(17)} " in line
    assert "ONNXRuntimeError" not in line and not (tmp_path / "onnx").exists()


def test_a_truncated_compressed_labelled_file_is_named(tmp_path):
    import gzip

    from bertkit.tasks.readers import read_rows

    packed = gzip.compress(("text,label\n" + "a fine day,1\n" * 2000).encode())
    (tmp_path / "train.csv.gz").write_bytes(packed[:len(packed) // 2])
    with pytest.raises(ValueError, match=r"train\.csv\.gz is truncated: its compressed data ends"):
        read_rows(tmp_path / "train.csv.gz")
