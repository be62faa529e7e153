"""GTE and NomicBERT as sentence-transformers embedders: directories written by sentence-transformers itself over
tiny HF-written checkpoints, read by ``bertkit.SentenceTransformer`` with their pooling and prompts, as the released
ones are (gte-*-v1.5: CLS pooling, normalised; nomic-embed-text: mean pooling and the prompts ``search_query: `` /
``search_document: `` of its config_sentence_transformers.json, the document prompt by default)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

st = pytest.importorskip("sentence_transformers")
transformers = pytest.importorskip("transformers")

from sentence_transformers.sentence_transformer import modules as st_modules  # noqa: E402

from bertkit import SentenceTransformer  # noqa: E402
from conftest import randomize_  # noqa: E402
from family_dirs import _bert_vocab  # noqa: E402

transformers.logging.set_verbosity_error()

SIZES = dict(hidden_size=36, num_hidden_layers=2, num_attention_heads=3, intermediate_size=26,
             max_position_embeddings=128, type_vocab_size=2, pad_token_id=0)
TEXTS = ["It is a truth universally acknowledged.", "what did mr darcy say?", "a", "the ball at netherfield was "
         "crowded, and elizabeth danced with several of the officers before supper"]
NOMIC_PROMPTS = {"query": "search_query: ", "document": "search_document: ", "classification": "classification: ",
                 "clustering": "clustering: "}
EMBEDDERS = {
    "gte": (transformers.GteConfig, transformers.GteModel, "cls", {}, None),
    "nomic_bert": (transformers.NomicBertConfig, transformers.NomicBertModel, "mean", NOMIC_PROMPTS, "document"),
}


def embedder_dir(root, family: str):
    config_class, model_class, pooling, prompts, default_prompt = EMBEDDERS[family]
    tokenizer = transformers.BertTokenizerFast(vocab=_bert_vocab())
    hf = randomize_(model_class(config_class(vocab_size=len(tokenizer), **SIZES)), std=0.1)
    hf.save_pretrained(root / "hf")
    tokenizer.save_pretrained(root / "hf")
    modules = [st_modules.Transformer(str(root / "hf"), max_seq_length=64),
               st_modules.Pooling(SIZES["hidden_size"], pooling_mode=pooling), st_modules.Normalize()]
    model = st.SentenceTransformer(modules=modules, prompts=prompts, default_prompt_name=default_prompt, device="cpu")
    model.save(str(root / "st"))
    return root / "st"


@pytest.mark.parametrize("family", EMBEDDERS)
def test_sentence_transformers_directory_encodes_as_sentence_transformers(family, tmp_path):
    directory = embedder_dir(tmp_path, family)
    pooling = json.loads((directory / "1_Pooling" / "config.json").read_text())
    assert pooling["pooling_mode"] == EMBEDDERS[family][2]
    ours, ref = SentenceTransformer(directory), st.SentenceTransformer(str(directory), device="cpu")
    assert ours.prompts == ref.prompts and ours.default_prompt_name == ref.default_prompt_name == EMBEDDERS[family][4]
    assert EMBEDDERS[family][3].items() <= ours.prompts.items()
    cases = [{}] + ([{"prompt_name": "query"}, {"prompt_name": "document"}, {"prompt": "search_query: "}]
                    if family == "nomic_bert" else [])
    for kwargs in cases:
        a, b = ours.encode(TEXTS, **kwargs), ref.encode(TEXTS, **kwargs)
        np.testing.assert_allclose(a, b, atol=2e-5, err_msg=str(kwargs))
    if family == "nomic_bert":  # the default prompt is the document one, and it changes the embedding
        np.testing.assert_allclose(ours.encode(TEXTS), ours.encode(TEXTS, prompt_name="document"), atol=1e-6)
        assert not np.allclose(ours.encode(TEXTS, prompt_name="query"), ours.encode(TEXTS), atol=1e-3)
    with torch.no_grad():
        assert ours.get_sentence_embedding_dimension() == SIZES["hidden_size"]
