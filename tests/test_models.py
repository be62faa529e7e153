"""Factories, init, embeddings, checkpointing, and HF-directory load/save behaviour of bertkit's own models."""

import inspect

import pytest
import torch

import bertkit
from bertkit import BERT, SIZES, BERTConfig
from bertkit.modeling import FACTORIES, TASKS
from conftest import padded_batch, randomize_


def test_every_task_and_size_has_a_documented_factory():
    for task in TASKS:
        for size in SIZES:
            name = f"bert_for_{task}_{size}"
            factory = getattr(bertkit, name)
            assert factory is FACTORIES[name]
            assert size in factory.__doc__ and TASKS[task][0].__name__ in factory.__doc__
    assert bertkit.models.bert_for_pre_training_base is FACTORIES["bert_for_pre_training_base"]


@pytest.mark.parametrize(("size", "millions"), [("base", 110), ("large", 340)])
def test_parameter_counts_match_the_paper(size, millions):
    with torch.device("meta"):  # no memory is allocated for the weights
        model = FACTORIES[f"bert_for_pre_training_{size}"]()
    assert abs(model.num_parameters() / 1e6 - millions) / millions < 0.02


def test_factory_overrides_and_num_labels(tiny_config):
    model = bertkit.bert_for_sequence_classification_tiny(num_labels=5, vocab_size=500)
    assert model.classifier.out_features == 5 and model.config.num_labels == 5
    assert model.get_input_embeddings().num_embeddings == 500
    direct = bertkit.BERTForTokenClassification(tiny_config, num_labels=7)
    assert direct.config.num_labels == 7 and direct.bert.config is direct.config
    assert tiny_config.num_labels == 2  # the caller's config is not mutated


def test_causal_lm_requires_a_decoder(tiny_config):
    with pytest.raises(ValueError, match="is_decoder"):
        bertkit.BERTForCausalLM(tiny_config)
    assert bertkit.bert_for_causal_lm_tiny().config.is_decoder


def test_init_follows_bert(tiny_config):
    model = bertkit.BERTForMaskedLM(tiny_config.replace(initializer_range=0.05, vocab_size=2000))
    emb = model.get_input_embeddings().weight
    assert torch.all(emb[tiny_config.pad_token_id] == 0)
    assert abs(emb[1:].std().item() - 0.05) < 0.005
    layer = model.bert.encoder.layer[0]
    assert torch.all(layer.attention.self.query.bias == 0)
    assert torch.all(layer.output.LayerNorm.weight == 1) and torch.all(model.cls.predictions.bias == 0)


def test_output_embeddings_are_tied_and_stay_tied_after_resize(tiny_config):
    model = bertkit.BERTForPreTraining(tiny_config)
    assert model.get_output_embeddings().weight is model.get_input_embeddings().weight
    assert model.cls.predictions.decoder.bias is model.cls.predictions.bias
    before = model.get_input_embeddings().weight[:10].clone()
    model.resize_token_embeddings(120)
    assert model.config.vocab_size == 120 and model.bert.config.vocab_size == 120
    assert model.get_output_embeddings().weight is model.get_input_embeddings().weight
    torch.testing.assert_close(model.get_input_embeddings().weight[:10], before)
    scores, _ = model(torch.tensor([[5, 119, 3]]))
    assert scores.shape == (1, 3, 120)


def test_untied_output_embeddings(tiny_config):
    model = bertkit.BERTForMaskedLM(tiny_config.replace(tie_word_embedding=False))
    assert model.get_output_embeddings().weight is not model.get_input_embeddings().weight


def test_backbone_without_pooler(tiny_config):
    seq, pooled = BERT(tiny_config, add_pooling_layer=False)(torch.tensor([[5, 6, 7]]))
    assert seq.shape == (1, 3, 36) and pooled is None


def test_forward_signature_is_lucids():
    params = list(inspect.signature(BERT.forward).parameters)[1:]
    assert params == ["input_ids", "attention_mask", "token_type_ids", "position_ids", "inputs_embeds",
                      "encoder_hidden_states", "encoder_attention_mask", "past_key_values", "use_cache",
                      "cache_position"]


def test_inputs_embeds_equals_input_ids(tiny_config):
    model = randomize_(BERT(tiny_config)).eval()
    ids, mask, types = padded_batch()
    a = model(ids, mask, types)
    b = model(inputs_embeds=model.get_input_embeddings()(ids), attention_mask=mask, token_type_ids=types)
    torch.testing.assert_close(a, b)


def test_gradient_checkpointing_gives_the_same_gradients(tiny_config):
    model = randomize_(bertkit.BERTForPreTraining(tiny_config.replace(hidden_dropout_prob=0.0)))
    ids, mask, types = padded_batch()
    labels = torch.where(mask.bool(), ids, -100)

    def grads():
        model.zero_grad()
        model.get_loss(labels, torch.tensor([0, 1, 0]), ids, mask, types).backward()
        return {n: p.grad.clone() for n, p in model.named_parameters()}

    plain = grads()
    model.gradient_checkpointing_enable()
    assert model.is_gradient_checkpointing
    checkpointed = grads()
    for name in plain:
        torch.testing.assert_close(checkpointed[name], plain[name], msg=name)


# ---------------------------------------------------------------------------- load / save

def test_save_load_round_trip_is_exact(tmp_path, tiny_config):
    model = randomize_(bertkit.BERTForQuestionAnswering(tiny_config)).eval()
    model.save_pretrained(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["config.json", "model.safetensors"]
    loaded = bertkit.BERTForQuestionAnswering.from_pretrained(tmp_path)
    assert loaded.config == model.config and not loaded.training
    for (name, a), b in zip(model.state_dict().items(), loaded.state_dict().values()):
        assert torch.equal(a, b), name
    assert loaded.load_report.initialized == [] and loaded.load_report.dropped == []


def test_from_pretrained_on_an_instance_loads_into_it(tmp_path, tiny_config):
    source = randomize_(bertkit.BERTForMaskedLM(tiny_config))
    source.save_pretrained(tmp_path)
    target = bertkit.BERTForMaskedLM(tiny_config)
    same = target.from_pretrained(tmp_path)
    assert same is target
    torch.testing.assert_close(target.cls.predictions.bias, source.cls.predictions.bias)
    with pytest.raises(ValueError, match="on the class"):
        target.from_pretrained(tmp_path, num_labels=3)


def test_backbone_checkpoint_into_task_model_reports_the_new_head(tmp_path, tiny_config):
    backbone = randomize_(BERT(tiny_config))
    backbone.save_pretrained(tmp_path)
    clf = bertkit.BERTForSequenceClassification.from_pretrained(tmp_path, num_labels=4)
    assert sorted(clf.load_report.initialized) == ["classifier.bias", "classifier.weight"]
    torch.testing.assert_close(clf.bert.pooler.dense.weight, backbone.pooler.dense.weight)
    assert clf.classifier.out_features == 4


def test_pretraining_checkpoint_into_backbone_and_classifier(tmp_path, tiny_config):
    randomize_(bertkit.BERTForPreTraining(tiny_config)).save_pretrained(tmp_path)
    backbone = BERT.from_pretrained(tmp_path)
    assert any(k.startswith("cls.") for k in backbone.load_report.dropped)
    clf = bertkit.BERTForSequenceClassification.from_pretrained(tmp_path, num_labels=3)
    assert set(clf.load_report.initialized) == {"classifier.weight", "classifier.bias"}


def test_classifier_with_other_num_labels_is_resized(tmp_path, tiny_config):
    randomize_(bertkit.BERTForSequenceClassification(tiny_config, num_labels=3)).save_pretrained(tmp_path)
    clf = bertkit.BERTForSequenceClassification.from_pretrained(tmp_path, num_labels=5)
    assert sorted(clf.load_report.resized) == ["classifier.bias", "classifier.weight"]
    assert clf.classifier.out_features == 5


def test_incompatible_checkpoint_is_an_error_naming_keys(tmp_path, tiny_config):
    randomize_(BERT(tiny_config.replace(num_hidden_layers=3))).save_pretrained(tmp_path)
    with pytest.raises(ValueError, match=r"encoder\.layer\.2"):
        BERT(tiny_config).from_pretrained(tmp_path)
    randomize_(BERT(tiny_config.replace(hidden_size=39))).save_pretrained(tmp_path / "wide")
    with pytest.raises(ValueError, match="shape"):
        BERT(tiny_config).from_pretrained(tmp_path / "wide")


def test_pytorch_bin_and_legacy_names_load(tmp_path, tiny_config):
    model = randomize_(bertkit.BERTForMaskedLM(tiny_config))
    state = {k.replace("LayerNorm.weight", "LayerNorm.gamma").replace("LayerNorm.bias", "LayerNorm.beta"): v
             for k, v in model.state_dict().items()}
    state["bert.embeddings.position_ids"] = torch.arange(40)[None]
    torch.save(state, tmp_path / "pytorch_model.bin")
    tiny_config.to_json_file(tmp_path / "config.json")
    loaded = bertkit.BERTForMaskedLM.from_pretrained(tmp_path)
    assert loaded.load_report.renamed
    ids, mask, types = padded_batch()
    torch.testing.assert_close(loaded(ids, mask, types), model.eval()(ids, mask, types))


def test_a_pickle_that_runs_code_is_refused(tmp_path, tiny_config):
    class Evil:
        def __reduce__(self):
            return (exec, ("import pathlib; pathlib.Path('pwned').touch()",))

    tiny_config.to_json_file(tmp_path / "config.json")
    torch.save({"x": Evil()}, tmp_path / "pytorch_model.bin")
    with pytest.raises(ValueError, match="refused"):
        BERT.from_pretrained(tmp_path)
    assert not (tmp_path / "pwned").exists()


def test_truncated_safetensors_is_a_clear_error(tmp_path, tiny_config):
    BERT(tiny_config).save_pretrained(tmp_path)
    data = (tmp_path / "model.safetensors").read_bytes()
    (tmp_path / "model.safetensors").write_bytes(data[: len(data) // 2])
    with pytest.raises(ValueError, match=r"model\.safetensors"):
        BERT.from_pretrained(tmp_path)


def test_missing_directory_and_weights_are_clear_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="not a checkpoint"):
        BERT.from_pretrained(tmp_path / "nope")
    BERTConfig(vocab_size=99, hidden_size=36, num_attention_heads=3).to_json_file(tmp_path / "config.json")
    with pytest.raises(FileNotFoundError, match=r"model\.safetensors"):
        BERT.from_pretrained(tmp_path)


def test_sharded_safetensors_load(tmp_path, tiny_config):
    import json

    from safetensors.torch import save_file

    model = randomize_(BERT(tiny_config))
    state = {k: v.contiguous() for k, v in model.state_dict().items()}
    keys = sorted(state)
    shards = {"model-00001-of-00002.safetensors": keys[::2], "model-00002-of-00002.safetensors": keys[1::2]}
    for name, part in shards.items():
        save_file({k: state[k] for k in part}, tmp_path / name, metadata={"format": "pt"})
    index = {"weight_map": {k: name for name, part in shards.items() for k in part}}
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps(index))
    tiny_config.to_json_file(tmp_path / "config.json")
    loaded = BERT.from_pretrained(tmp_path)
    torch.testing.assert_close(loaded.pooler.dense.weight, model.pooler.dense.weight)
