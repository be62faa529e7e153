"""Bad configs are ValueErrors naming the file (when read from one), the key and the expected vs given type."""

from __future__ import annotations

import json
import re

import pytest

from bertkit import BERTConfig


def write(tmp_path, content) -> str:
    path = tmp_path / "config.json"
    path.write_text(content if isinstance(content, str) else json.dumps(content))
    return str(path)


def read_error(tmp_path, content) -> str:
    path = write(tmp_path, content)
    with pytest.raises(ValueError) as info:
        BERTConfig.from_json_file(path)
    message = str(info.value)
    assert message.startswith(path), message  # every content problem names the file
    return message[len(path):]


# ---------------------------------------------------------------------------- the file itself

def test_invalid_json_names_the_file(tmp_path):
    assert re.match(r" is not valid JSON \(.*: line 1, column 2\); it should hold a BERT config",
                    read_error(tmp_path, "{bad json"))


def test_json_that_is_no_object_names_the_file(tmp_path):
    assert read_error(tmp_path, [1, 2]).startswith(" holds a JSON array, not a JSON object; it should hold a BERT")
    assert read_error(tmp_path, '"hidden_size"').startswith(" holds a JSON string, not a JSON object")


def test_binary_file_and_directory(tmp_path):
    path = tmp_path / "config.json"
    path.write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(ValueError, match=f"^{re.escape(str(path))} is not UTF-8 text"):
        BERTConfig.from_json_file(path)
    with pytest.raises(ValueError, match=r"is a directory; pass the config\.json"):
        BERTConfig.from_json_file(tmp_path)
    with pytest.raises(FileNotFoundError):
        BERTConfig.from_json_file(tmp_path / "missing.json")


# ---------------------------------------------------------------------------- field types

@pytest.mark.parametrize(("key", "value", "expected"), [
    ("hidden_dropout_prob", "0.1",
     "hidden_dropout_prob must be a number, got the string '0.1'; write the number without quotes (0.1)."),
    ("hidden_size", "768", "hidden_size must be an integer, got the string '768'; write the number without quotes"),
    ("hidden_size", 768.0, "hidden_size must be an integer, got the number 768.0; write it as the integer 768."),
    ("num_hidden_layers", True, "num_hidden_layers must be an integer, got the boolean True."),
    ("tie_word_embeddings", 1, "tie_word_embeddings must be true or false, got the integer 1; write true (JSON)"),
    ("is_decoder", "false", "is_decoder must be true or false, got the string 'false'; write false (JSON)"),
    ("layer_norm_eps", [1e-12], "layer_norm_eps must be a number, got the list [1e-12]."),
    ("mask_token_id", "103", "mask_token_id must be an integer (or null/None for the default), got the string"),
    ("problem_type", 3, "problem_type must be a string (or null/None for the default), got the integer 3."),
    ("hidden_act", 3, "hidden_act must be a string or a callable, got the integer 3."),
    ("id2label", ["NEG", "POS"], "id2label must be a mapping (or null/None for the default), got the list"),
    ("id2label", {"first": "NEG"}, "id2label must map label ids (integers) to names, got the key 'first'."),
])
def test_wrong_type_names_file_key_and_types(tmp_path, key, value, expected):
    message = read_error(tmp_path, {"hidden_size": 36, "num_attention_heads": 3, key: value})
    assert message.startswith(f": {expected}"), message


def test_ints_where_numbers_are_expected_are_fine(tmp_path):
    config = BERTConfig.from_json_file(write(tmp_path, {"hidden_dropout_prob": 0, "attention_probs_dropout_prob": 0}))
    assert config.hidden_dropout_prob == 0 and config.attention_probs_dropout_prob == 0


def test_nulls_keep_the_defaults(tmp_path):
    config = BERTConfig.from_json_file(write(tmp_path, {"classifier_dropout": None, "pad_token_id": None}))
    assert config.classifier_dropout is None and config.pad_token_id == 0


def test_invalid_values_from_a_file_name_it_too(tmp_path):
    assert read_error(tmp_path, {"hidden_dropout_prob": 1.5}) == \
        ": BERTConfig.hidden_dropout_prob must lie in [0, 1), got 1.5."
    assert "model_type is 'longformer'" in read_error(tmp_path, {"model_type": "longformer"})


@pytest.mark.parametrize(("changes", "expected"), [
    ({"hidden_dropout_prob": "0.1"}, "BERTConfig.hidden_dropout_prob must be a number, got the string '0.1'"),
    ({"use_cache": 1}, "BERTConfig.use_cache must be true or false, got the integer 1"),
    ({"embedding_layer_norm": "no"}, "BERTConfig.embedding_layer_norm must be true or false, got the string 'no'."),
    ({"chunk_size_feed_forward": 0.5}, "BERTConfig.chunk_size_feed_forward must be an integer, got the number 0.5."),
    ({"attn_implementation": None}, "BERTConfig.attn_implementation must be a string, got None"),
    ({"vocab_size": 99.0}, "BERTConfig.vocab_size must be an integer, got the number 99.0"),
])
def test_constructor_and_from_dict_check_types(changes, expected):
    for build in (lambda: BERTConfig(**changes), lambda: BERTConfig.from_dict(changes),
                  lambda: BERTConfig().replace(**changes)):
        with pytest.raises(ValueError, match=re.escape(expected)):
            build()


def test_hf_dict_errors_use_the_hf_key():
    with pytest.raises(ValueError, match=r"^tie_word_embeddings must be true or false, got the string 'yes'\.$"):
        BERTConfig.from_hf_dict({"tie_word_embeddings": "yes"})


@pytest.mark.parametrize("reader", [BERTConfig.from_dict, BERTConfig.from_hf_dict])
def test_readers_want_a_mapping(reader):
    with pytest.raises(TypeError, match=r"takes a dict of config fields .*got list"):
        reader([("hidden_size", 768)])


def test_validate_rechecks_types_after_mutation():
    config = BERTConfig()
    config.hidden_dropout_prob = "0.2"
    with pytest.raises(ValueError, match="hidden_dropout_prob must be a number"):
        config.validate()
