import json

import pytest
import torch

from bertkit import BERTConfig, preset_config
from bertkit.config import ACTIVATIONS
from bertkit.modeling.layers import ACT_FNS


@pytest.mark.parametrize(("changes", "field"), [
    ({"hidden_size": 100, "num_attention_heads": 12}, "num_attention_heads"),
    ({"vocab_size": 0}, "vocab_size"),
    ({"num_hidden_layers": -1}, "num_hidden_layers"),
    ({"hidden_act": "gelu_fancy"}, "hidden_act"),
    ({"hidden_dropout_prob": 1.5}, "hidden_dropout_prob"),
    ({"attn_implementation": "flash"}, "attn_implementation"),
    ({"add_cross_attention": True}, "add_cross_attention"),
    ({"mask_token_id": 40000}, "mask_token_id"),
    ({"layer_norm_eps": 0.0}, "layer_norm_eps"),
    ({"problem_type": "ranking"}, "problem_type"),
    ({"num_labels": 3, "id2label": {0: "a"}}, "id2label"),
])
def test_validation_names_the_field(changes, field):
    with pytest.raises(ValueError, match=field):
        BERTConfig(**changes)


def test_head_divisibility_error_suggests_a_fix():
    with pytest.raises(ValueError, match="num_attention_heads=10"):
        BERTConfig(hidden_size=100, num_attention_heads=12)


def test_every_activation_name_has_a_function():
    assert set(ACTIVATIONS) == set(ACT_FNS)
    x = torch.linspace(-3, 3, 7)
    torch.testing.assert_close(ACT_FNS["gelu"](x), 0.5 * x * (1 + torch.erf(x / 2**0.5)))


def test_hf_activation_aliases_are_normalised():
    assert BERTConfig(hidden_act="gelu_new").hidden_act == "gelu_tanh"
    assert BERTConfig(hidden_act="gelu_tanh").to_hf_dict()["hidden_act"] == "gelu_pytorch_tanh"


def test_callable_activation_serialises_by_name_or_refuses():
    cfg = BERTConfig(hidden_act=torch.nn.functional.gelu)
    assert cfg.to_dict()["hidden_act"] == "gelu"
    with pytest.raises(ValueError, match="hidden_act"):
        BERTConfig(hidden_act=lambda x: x).to_dict()


def test_json_round_trip(tmp_path):
    cfg = preset_config("mini", num_labels=5, classifier_dropout=0.2, is_decoder=True)
    cfg.to_json_file(tmp_path / "c.json")
    assert BERTConfig.from_json_file(tmp_path / "c.json") == cfg
    assert BERTConfig.from_dict(json.loads(cfg.to_json_string())) == cfg


def test_from_dict_rejects_unknown_keys():
    with pytest.raises(ValueError, match="hidden_sise"):
        BERTConfig.from_dict({"hidden_sise": 3})


def test_hf_config_round_trip_and_transformers_reads_it(tmp_path):
    transformers = pytest.importorskip("transformers")
    cfg = BERTConfig(vocab_size=99, hidden_size=36, num_attention_heads=3, intermediate_size=37,
                     tie_word_embedding=False, num_labels=4, hidden_act="gelu_tanh")
    hf_dict = cfg.to_hf_dict("BertForSequenceClassification")
    assert hf_dict["tie_word_embeddings"] is False and hf_dict["model_type"] == "bert"
    (tmp_path / "config.json").write_text(json.dumps(hf_dict))
    hf = transformers.BertConfig.from_pretrained(tmp_path)
    assert (hf.hidden_size, hf.num_labels, hf.tie_word_embeddings) == (36, 4, False)
    hf.save_pretrained(tmp_path / "back")
    back = BERTConfig.from_json_file(tmp_path / "back" / "config.json")
    assert back.replace(id2label=None) == cfg.replace(id2label=None)


def test_google_bert_config_is_read():
    google = {"attention_probs_dropout_prob": 0.1, "directionality": "bidi", "hidden_act": "gelu",
              "hidden_dropout_prob": 0.1, "hidden_size": 768, "initializer_range": 0.02,
              "intermediate_size": 3072, "max_position_embeddings": 512, "num_attention_heads": 12,
              "num_hidden_layers": 12, "pooler_fc_size": 768, "pooler_type": "first_token_transform",
              "type_vocab_size": 2, "vocab_size": 21128}
    cfg = BERTConfig.from_hf_dict(google)
    assert cfg.vocab_size == 21128 and cfg.mask_token_id == 103


def test_unsupported_position_embeddings_are_refused():
    with pytest.raises(ValueError, match="position_embedding_type"):
        BERTConfig.from_hf_dict({"position_embedding_type": "relative_key"})


def test_small_vocab_leaves_special_ids_unset():
    cfg = BERTConfig(vocab_size=50)
    assert cfg.mask_token_id is None and cfg.special_token_ids == (0,)


def test_replace_validates_and_never_mutates():
    cfg = BERTConfig()
    assert cfg.replace(num_labels=7).num_labels == 7 and cfg.num_labels == 2
    with pytest.raises(ValueError, match="bogus"):
        cfg.replace(bogus=1)
