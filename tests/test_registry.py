"""The weights registry (BERT_Weights & co.): the entries' names, URLs and configs, lookup, validation.

Downloading those entries (fetch, verify, resume, unpack, convert, cache) is in test_registry_downloads.py.
"""

from __future__ import annotations

from dataclasses import fields
from itertools import product

import pytest

from bertkit import BERTConfig
from bertkit.weights.registry import (
    FORMATS,
    WEIGHTS_ENUMS,
    BERT_ForQuestionAnswering_Weights,
    BERT_ForSequenceClassification_Weights,
    BERT_Weights,
    BERTForQuestionAnswering_Weights,
    WeightsEntry,
    entries,
    lookup,
)

BERT_FIELDS = {f.name for f in fields(BERTConfig)}


# ====================================================================== registry contents
def test_24_small_berts_with_googles_names_and_urls():
    small = [m for m in BERT_Weights if m.name.startswith("UNCASED_L")]
    assert len(small) == 24
    got = {(m.config["num_hidden_layers"], m.config["hidden_size"]) for m in small}
    assert got == set(product((2, 4, 6, 8, 10, 12), (128, 256, 512, 768)))
    for m in small:
        L, H = m.config["num_hidden_layers"], m.config["hidden_size"]
        assert m.config["num_attention_heads"] == H // 64 and m.config["intermediate_size"] == 4 * H
        stem = f"uncased_L-{L}_H-{H}_A-{H // 64}"
        assert m.url == f"https://storage.googleapis.com/bert_models/2020_02_20/{stem}.zip"
        assert f"google/bert_{stem}" in m.aliases and m.do_lower_case
    assert BERT_Weights.TINY is BERT_Weights.UNCASED_L2_H128_A2
    assert BERT_Weights.MEDIUM is BERT_Weights.UNCASED_L8_H512_A8


def test_original_releases():
    expected = {  # member: (url path, vocab, layers, hidden, lower-case)
        "BASE_UNCASED": ("2018_10_18/uncased_L-12_H-768_A-12.zip", 30522, 12, 768, True),
        "LARGE_UNCASED": ("2018_10_18/uncased_L-24_H-1024_A-16.zip", 30522, 24, 1024, True),
        "BASE_CASED": ("2018_10_18/cased_L-12_H-768_A-12.zip", 28996, 12, 768, False),
        "LARGE_CASED": ("2018_10_18/cased_L-24_H-1024_A-16.zip", 28996, 24, 1024, False),
        "LARGE_UNCASED_WWM": ("2019_05_30/wwm_uncased_L-24_H-1024_A-16.zip", 30522, 24, 1024, True),
        "LARGE_CASED_WWM": ("2019_05_30/wwm_cased_L-24_H-1024_A-16.zip", 28996, 24, 1024, False),
        "BASE_MULTILINGUAL_CASED": ("2018_11_23/multi_cased_L-12_H-768_A-12.zip", 119547, 12, 768, False),
        "BASE_MULTILINGUAL_UNCASED": ("2018_11_03/multilingual_L-12_H-768_A-12.zip", 105879, 12, 768, True),
        "BASE_CHINESE": ("2018_11_03/chinese_L-12_H-768_A-12.zip", 21128, 12, 768, False),
    }
    for member_name, (path, vocab, layers, hidden, lower) in expected.items():
        m = BERT_Weights[member_name]
        assert m.url == f"https://storage.googleapis.com/bert_models/{path}"
        config = m.config
        assert (config["vocab_size"], config["num_hidden_layers"], config["hidden_size"]) == (vocab, layers, hidden)
        assert m.do_lower_case is lower and m.format == "tf1-zip" and m.sha256 is None
    assert len(BERT_Weights) == 9 + 24  # aliases (DEFAULT, PRE_TRAIN_BASE, TINY...) are not extra members


def test_default_is_base_uncased_and_builds_a_config():
    assert BERT_Weights.DEFAULT is BERT_Weights.BASE_UNCASED is BERT_Weights.PRE_TRAIN_BASE
    config = BERTConfig(**BERT_Weights.DEFAULT.config)  # the lucid end-to-end example
    assert (config.vocab_size, config.hidden_size, config.num_hidden_layers, config.num_attention_heads,
            config.intermediate_size, config.hidden_act) == (30522, 768, 12, 12, 3072, "gelu")
    assert "bert-base-uncased" in BERT_Weights.DEFAULT.aliases
    changed = BERT_Weights.DEFAULT.config  # a fresh dict each time: the registry cannot be changed through it
    changed["hidden_size"] = 1
    assert BERT_Weights.DEFAULT.config["hidden_size"] == 768
    with pytest.raises(TypeError):
        BERT_Weights.DEFAULT.entry.config["hidden_size"] = 1


@pytest.mark.parametrize("member", [m for enum in WEIGHTS_ENUMS for m in enum], ids=repr)
def test_every_entry_is_valid(member):
    assert set(member.config) <= BERT_FIELDS
    BERTConfig(**member.config)  # validates
    assert member.license == "Apache-2.0" and member.format in FORMATS
    assert member.sha256 is None  # nothing pinned: Google published no checksums
    if member.format == "hf-dir":
        assert member.url.startswith("https://huggingface.co/google-bert/") and member.url.endswith("/resolve/main/")
        assert member.files == ("config.json", "model.safetensors", "vocab.txt")
    else:
        assert member.url.startswith("https://storage.googleapis.com/bert_models/") and member.url.endswith(".zip")


def test_names_and_aliases_are_unique_and_cover_the_shortcut_names():
    names = [n for e in entries() for n in {e.name, *e.aliases}]
    assert len(names) == len(set(names))
    assert len({e.name for e in entries()}) == len(entries()) == 33 + 2 + 1
    for shortcut in ("bert-base-uncased", "bert-large-uncased", "bert-base-cased", "bert-large-cased",
                     "bert-base-multilingual-uncased", "bert-base-multilingual-cased", "bert-base-chinese",
                     "bert-large-uncased-whole-word-masking", "bert-large-cased-whole-word-masking",
                     "bert-large-uncased-whole-word-masking-finetuned-squad",
                     "bert-large-cased-whole-word-masking-finetuned-squad", "bert-base-cased-finetuned-mrpc",
                     "google/bert_uncased_L-2_H-128_A-2", "google-bert/bert-base-uncased"):
        assert shortcut in names


def test_task_enums():
    assert BERTForQuestionAnswering_Weights is BERT_ForQuestionAnswering_Weights  # lucid's spelling
    squad = BERT_ForQuestionAnswering_Weights.DEFAULT
    assert squad is BERT_ForQuestionAnswering_Weights.SQUAD1_LARGE_UNCASED_WWM
    repo = "https://huggingface.co/google-bert/bert-large-uncased-whole-word-masking-finetuned-squad/resolve/main/"
    assert squad.entry.downloads() == [(repo + f, f) for f in ("config.json", "model.safetensors", "vocab.txt")]
    assert BERT_ForSequenceClassification_Weights.DEFAULT.config["num_labels"] == 2


def test_lookup():
    base = BERT_Weights.BASE_UNCASED.entry
    for name in (BERT_Weights.DEFAULT, base, "bert-base-uncased", "google-bert/bert-base-uncased", "BASE_UNCASED",
                 "DEFAULT", "BERT_Weights.DEFAULT", "PRE_TRAIN_BASE", "Bert-Base-Uncased"):
        assert lookup(name) is base, name
    assert lookup("google/bert_uncased_L-4_H-256_A-4") is BERT_Weights.MINI.entry
    assert lookup("bert_uncased_L-4_H-256_A-4") is BERT_Weights.MINI.entry
    assert lookup("BERT_ForQuestionAnswering_Weights.DEFAULT") is BERT_ForQuestionAnswering_Weights.DEFAULT.entry


def test_lookup_error_lists_close_matches():
    with pytest.raises(ValueError, match=r"'bert-base-uncsed'.*Did you mean 'bert-base-uncased'"):
        lookup("bert-base-uncsed")
    with pytest.raises(ValueError, match="No registered BERT weights"):
        lookup("roberta-base-xyz-nothing-like-it")
    with pytest.raises(TypeError):
        lookup(3)


def test_entry_rejects_bad_fields():
    with pytest.raises(ValueError, match="format"):
        WeightsEntry(name="x", url="http://x/x.zip", sha256=None, config={}, do_lower_case=True, format="rar")
    with pytest.raises(ValueError, match="folder name"):
        WeightsEntry(name="../x", url="http://x/x.zip", sha256=None, config={}, do_lower_case=True)



def test_a_hub_name_that_is_not_here_says_where_bertkit_looked_and_how_to_fetch_it(monkeypatch, tmp_path, capsys):
    """Offline or not, a Hub id bertkit has no entry for is refused saying it looked here and in the registry (not
    on the Hub) and the command that fetches the model; a path stays a path's error."""
    from bertkit.cli import main as cli
    from bertkit.sentence import SentenceTransformer

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(FileNotFoundError, match=r"^sentence-transformers/all-MiniLM-L6-v2 is no file or directory "
                                                r"here, nor a name in bertkit's registry .* does not download other "
                                                r"models from the Hugging Face Hub\. Fetch the model first.*: hf "
                                                r"download sentence-transformers/all-MiniLM-L6-v2 --local-dir "
                                                r"all-MiniLM-L6-v2 "):
        SentenceTransformer("sentence-transformers/all-MiniLM-L6-v2")
    (tmp_path / "pairs.jsonl").write_text('{"anchor": "a", "positive": "b"}\n{"anchor": "c", "positive": "d"}\n')
    assert cli(["finetune", "embed", "--model", "all-MiniLM-L6-v2", "--train", "pairs.jsonl", "-o", "run"]) == 1
    assert "hf download ORGANISATION/all-MiniLM-L6-v2 --local-dir all-MiniLM-L6-v2" in capsys.readouterr().err
    with pytest.raises(FileNotFoundError, match="runs/typo/model is not a checkpoint bertkit can find"):
        SentenceTransformer("runs/typo/model")
