"""Parameter counts from the config alone equal those of built models, and ``bertkit info`` never builds one."""

from __future__ import annotations

import json
import time

import pytest

import bertkit.modeling as modeling
from bertkit import BERTConfig
from bertkit.cli import main
from bertkit.modeling.counting import POOLED, count_parameters
from conftest import SPECIAL, TINY

CLASSES = [modeling.BERT, modeling.BERTForPreTraining, modeling.BERTForMaskedLM, modeling.BERTForCausalLM,
           modeling.BERTForNextSentencePrediction, modeling.BERTForSequenceClassification,
           modeling.BERTForMultipleChoice, modeling.BERTForTokenClassification, modeling.BERTForQuestionAnswering]
CONFIGS = [{}, {"tie_word_embedding": False}, {"embedding_layer_norm": False, "attention_bias": False},
           {"add_cross_attention": True}, {"num_labels": 5, "num_hidden_layers": 3, "intermediate_size": 50}]


def test_every_architecture_info_reports_is_covered():
    assert {cls.hf_architecture for cls in (*CLASSES, modeling.ELECTRAForPreTraining)} == set(POOLED)


@pytest.mark.parametrize("overrides", CONFIGS)
@pytest.mark.parametrize("cls", CLASSES, ids=lambda cls: cls.hf_architecture)
def test_formula_equals_the_built_model(cls, overrides):
    config = BERTConfig(**{**TINY, **SPECIAL, "is_decoder": True, **overrides})  # a decoder: the causal LM too
    built = cls(config)
    assert count_parameters(config, cls.hf_architecture) == sum(p.numel() for p in built.parameters())


def test_info_counts_a_huge_config_without_building_it(tmp_path, capsys):
    """100,000 layers ran 300 s with memory climbing when info built the model (even on the meta device)."""
    config = BERTConfig(**{**TINY, **SPECIAL, "num_hidden_layers": 100_000}).to_hf_dict("BertForMaskedLM")
    (tmp_path / "config.json").write_text(json.dumps(config), encoding="utf-8")
    start = time.perf_counter()
    assert main(["info", str(tmp_path)]) == 0
    assert time.perf_counter() - start < 10
    out = capsys.readouterr().out
    assert "L=100000" in out and "with its head (BertForMaskedLM)" in out
