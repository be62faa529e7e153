"""Loads say what they did: every adaptation is in ``model.load_report`` and is a ``LoadWarning``; unknown heads
and integer-for-float tensors are refused; dtype casts are reported."""

import json
import logging
import warnings

import numpy as np
import pytest
import torch
from safetensors.torch import save_file

import bertkit
from bertkit import BERT
from bertkit.weights.adapt import LoadWarning
from conftest import padded_batch, randomize_


def _save(directory, model, rename=lambda k: k, dtype=None):
    """``model``'s tensors as an HF directory, keys renamed and floats stored as ``dtype``."""
    directory.mkdir(parents=True, exist_ok=True)
    state = {rename(k): (v.to(dtype) if dtype is not None and v.is_floating_point() else v).contiguous()
             for k, v in model.state_dict().items() if "decoder" not in k}
    save_file(state, directory / "model.safetensors")
    (directory / "config.json").write_text(json.dumps(model.config.to_hf_dict(architecture=model.hf_architecture)))
    return directory


def _load_warnings(load) -> tuple[object, list[str]]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = load()
    assert all(issubclass(w.category, LoadWarning) for w in caught), [str(w.message) for w in caught]
    return result, [str(w.message) for w in caught]


# ---------------------------------------------------------------------------- 1. loads say what they did

def test_a_new_head_is_a_load_warning_naming_the_keys_and_the_checkpoint(tmp_path, tiny_config):
    randomize_(BERT(tiny_config)).save_pretrained(tmp_path)
    with pytest.warns(LoadWarning) as record:
        clf = bertkit.BERTForSequenceClassification.from_pretrained(tmp_path, num_labels=4)
    (warning,) = record
    assert str(tmp_path) in str(warning.message)
    assert "newly initialised in BERTForSequenceClassification" in str(warning.message)
    assert "classifier.weight, classifier.bias" in str(warning.message)
    assert warning.filename == __file__, "the warning points at the caller's line, not into bertkit"
    assert sorted(clf.load_report.initialized) == ["classifier.bias", "classifier.weight"]


def test_dropped_pretraining_heads_are_a_load_warning(tmp_path, tiny_config):
    randomize_(bertkit.BERTForPreTraining(tiny_config)).save_pretrained(tmp_path)
    backbone, messages = _load_warnings(lambda: BERT.from_pretrained(tmp_path))
    (message,) = messages
    assert "not in BERT, dropped" in message and "cls.seq_relationship.weight" in message
    assert "cls.seq_relationship.weight" in backbone.load_report.dropped


def test_an_absent_pooler_is_a_load_warning(tmp_path, tiny_config):
    randomize_(BERT(tiny_config, add_pooling_layer=False)).save_pretrained(tmp_path)
    _, messages = _load_warnings(lambda: BERT.from_pretrained(tmp_path))
    assert len(messages) == 1 and "pooler.dense.weight" in messages[0] and "newly initialised" in messages[0]


def test_a_resized_classifier_is_a_load_warning(tmp_path, tiny_config):
    randomize_(bertkit.BERTForSequenceClassification(tiny_config, num_labels=3)).save_pretrained(tmp_path)
    _, messages = _load_warnings(lambda: bertkit.BERTForSequenceClassification.from_pretrained(tmp_path,
                                                                                                num_labels=5))
    assert len(messages) == 1 and "re-initialised" in messages[0] and "num_labels" in messages[0]
    assert "classifier.weight" in messages[0]


def test_an_exact_load_and_legacy_renames_warn_nothing_but_debug_log_the_report(tmp_path, tiny_config, caplog):
    model = randomize_(bertkit.BERTForMaskedLM(tiny_config))
    _save(tmp_path, model, rename=lambda k: k.replace("LayerNorm.weight", "LayerNorm.gamma"))
    with warnings.catch_warnings(), caplog.at_level(logging.DEBUG, logger="bertkit.weights"):
        warnings.simplefilter("error", LoadWarning)
        loaded = bertkit.BERTForMaskedLM.from_pretrained(tmp_path)
    assert loaded.load_report.renamed
    assert any("renamed" in r.getMessage() and str(tmp_path) in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize("silence", ["argument", "filter"])
def test_load_warnings_are_silenced_by_warn_false_or_the_standard_filter(tmp_path, tiny_config, silence):
    randomize_(bertkit.BERTForPreTraining(tiny_config)).save_pretrained(tmp_path)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        if silence == "argument":
            clf = bertkit.BERTForSequenceClassification.from_pretrained(tmp_path, num_labels=3, warn=False)
        else:
            warnings.filterwarnings("ignore", category=LoadWarning)
            clf = bertkit.BERTForSequenceClassification.from_pretrained(tmp_path, num_labels=3)
    assert not caught
    assert clf.load_report.initialized and clf.load_report.dropped, "the report is kept when warnings are off"


def test_loading_options_are_checked(tmp_path, tiny_config):
    randomize_(BERT(tiny_config)).save_pretrained(tmp_path)
    with pytest.raises(TypeError, match="warn must be True or False"):
        BERT.from_pretrained(tmp_path, warn="no")
    with pytest.raises(TypeError, match="strict must be True or False"):
        BERT.from_pretrained(tmp_path, strict=None)
    same = BERT(tiny_config)
    assert same.from_pretrained(tmp_path, strict=True, warn=False) is same, "options are no config overrides"


# ---------------------------------------------------------------------------- 2. a head under another name

def test_a_head_under_an_unknown_name_is_refused_in_strict_mode(tmp_path, tiny_config):
    source = randomize_(bertkit.BERTForSequenceClassification(tiny_config, num_labels=3))
    _save(tmp_path, source, rename=lambda k: k.replace("classifier.", "score."))
    with pytest.raises(ValueError) as error:
        bertkit.BERTForSequenceClassification.from_pretrained(tmp_path)
    message = str(error.value)
    assert str(tmp_path) in message
    assert "unexpected keys score.bias, score.weight:" in message  # safetensors stores keys sorted
    assert "BERTForSequenceClassification's classifier.*" in message and "strict=False" in message

    loaded, messages = _load_warnings(
        lambda: bertkit.BERTForSequenceClassification.from_pretrained(tmp_path, strict=False))
    assert sorted(loaded.load_report.dropped) == ["score.bias", "score.weight"]
    assert sorted(loaded.load_report.initialized) == ["classifier.bias", "classifier.weight"]
    assert any("score.weight" in m and "dropped" in m for m in messages)
    assert any("classifier.weight" in m and "newly initialised" in m for m in messages)
    for (name, a), b in zip(source.bert.state_dict().items(), loaded.bert.state_dict().values()):
        assert torch.equal(a, b), name


def test_an_unknown_key_in_a_backbone_is_refused_but_known_heads_are_dropped(tmp_path, tiny_config):
    source = randomize_(bertkit.BERTForQuestionAnswering(tiny_config))
    state = {k: v for k, v in source.state_dict().items()}
    state["bert.adapter.weight"] = torch.zeros(3)
    save_file(state, tmp_path / "model.safetensors")
    tiny_config.to_json_file(tmp_path / "config.json")
    with pytest.raises(ValueError, match=r"unexpected keys adapter\.weight: BERT has no place"):
        BERT.from_pretrained(tmp_path)
    backbone = BERT.from_pretrained(tmp_path, strict=False, warn=False)
    assert sorted(backbone.load_report.dropped) == ["adapter.weight", "qa_outputs.bias", "qa_outputs.weight"]


def test_convert_refuses_an_unknown_head_too(tmp_path, tiny_config):
    from bertkit.weights.convert import convert

    source = randomize_(bertkit.BERTForSequenceClassification(tiny_config, num_labels=3))
    _save(tmp_path / "src", source, rename=lambda k: k.replace("classifier.", "score."))
    with pytest.raises(ValueError, match=r"score\.weight"):
        convert(tmp_path / "src", tmp_path / "out")
    assert not (tmp_path / "out").exists()


# ---------------------------------------------------------------------------- 3. dtype casts

@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float64])
def test_a_float_checkpoint_in_another_dtype_is_cast_with_a_warning(tmp_path, tiny_config, dtype):
    source = randomize_(bertkit.BERTForMaskedLM(tiny_config)).eval()
    _save(tmp_path, source, dtype=dtype)
    loaded, messages = _load_warnings(lambda: bertkit.BERTForMaskedLM.from_pretrained(tmp_path))
    (message,) = messages
    assert f"cast from {dtype} to torch.float32" in message and f"all {loaded.load_report.loaded} tensors" in message
    assert loaded.load_report.cast["bert.embeddings.word_embeddings.weight"] == (dtype, torch.float32)
    assert all(p.dtype == torch.float32 for p in loaded.parameters())
    for name, p in source.state_dict().items():
        torch.testing.assert_close(loaded.state_dict()[name], p.to(dtype).float(), msg=name)


def test_a_cast_of_some_tensors_names_them(tmp_path, tiny_config):
    source = randomize_(BERT(tiny_config))
    state = {k: v.contiguous() for k, v in source.state_dict().items()}
    state["embeddings.word_embeddings.weight"] = state["embeddings.word_embeddings.weight"].half()
    save_file(state, tmp_path / "model.safetensors")
    tiny_config.to_json_file(tmp_path / "config.json")
    _, messages = _load_warnings(lambda: BERT.from_pretrained(tmp_path))
    assert messages == [f"{tmp_path}: cast from torch.float16 to torch.float32 (the dtype of BERT's parameters): "
                        "embeddings.word_embeddings.weight"]


def test_a_checkpoint_in_the_models_own_half_dtype_is_not_a_cast(tmp_path, tiny_config):
    source = randomize_(bertkit.BERTForMaskedLM(tiny_config))
    _save(tmp_path, source, dtype=torch.float16)
    target = bertkit.BERTForMaskedLM(tiny_config).half()
    _, messages = _load_warnings(lambda: target.from_pretrained(tmp_path))
    assert not messages and not target.load_report.cast


def test_an_integer_tensor_for_a_float_parameter_is_an_error(tmp_path, tiny_config):
    source = randomize_(BERT(tiny_config))
    tiny_config.to_json_file(tmp_path / "config.json")
    state = {k: v.contiguous() for k, v in source.state_dict().items()}
    state["encoder.layer.0.attention.self.query.weight"] = torch.ones_like(
        state["encoder.layer.0.attention.self.query.weight"], dtype=torch.int64)
    save_file(state, tmp_path / "model.safetensors")
    with pytest.raises(ValueError, match=r"encoder\.layer\.0\.attention\.self\.query\.weight \(torch\.int64, "
                                         r"BERT has torch\.float32\)"):
        BERT.from_pretrained(tmp_path)


def test_integer_buffers_older_checkpoints_saved_load_silently(tmp_path, tiny_config):
    source = randomize_(BERT(tiny_config))
    state = {k: v.contiguous() for k, v in source.state_dict().items()}
    state["embeddings.position_ids"] = torch.arange(40)[None]
    state["embeddings.token_type_ids"] = torch.zeros(1, 40, dtype=torch.int64)
    save_file(state, tmp_path / "model.safetensors")
    tiny_config.to_json_file(tmp_path / "config.json")
    loaded, messages = _load_warnings(lambda: BERT.from_pretrained(tmp_path))
    assert not messages and not loaded.load_report.cast
    ids, mask, types = padded_batch()
    with torch.no_grad():
        torch.testing.assert_close(loaded(ids, mask, types), source.eval()(ids, mask, types))


def test_a_half_precision_tf_checkpoint_keeps_its_dtype_until_the_cast_is_reported(tmp_path, tiny_config):
    from bertkit.weights.formats import read_checkpoint
    from bertkit.weights.tables import hf_to_tf
    from bertkit.weights.tf_bundle import write_bundle

    source = randomize_(bertkit.BERTForPreTraining(tiny_config))
    state = {k: v.half().numpy() for k, v in source.state_dict().items() if ".decoder." not in k}
    write_bundle(tmp_path / "bert_model.ckpt", {k: np.ascontiguousarray(v) for k, v in hf_to_tf(state).items()})
    (tmp_path / "bert_config.json").write_text(json.dumps(tiny_config.to_google_dict()))
    assert read_checkpoint(tmp_path).state_dict["bert.embeddings.word_embeddings.weight"].dtype == torch.float16
    loaded, messages = _load_warnings(lambda: bertkit.BERTForPreTraining.from_pretrained(tmp_path))
    assert len(messages) == 1 and "cast from torch.float16 to torch.float32" in messages[0]
    assert loaded.load_report.cast["cls.predictions.bias"] == (torch.float16, torch.float32)
