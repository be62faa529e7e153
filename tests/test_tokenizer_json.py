"""bertkit's tokenizer.json tokenizers (TokenizerFast) and its loader against ``transformers.AutoTokenizer``.

The test tokenizers (tokenizer_json_helpers.py) are trained here and saved by transformers' own
classes; bertkit's :func:`~bertkit.tokenization.load_tokenizer` and transformers' AutoTokenizer then
read the same directory and must agree on a multilingual held-out text (tests/fixtures/tokenizers/
multilingual.json): ids, masks, which outputs are returned, offsets, word ids, pairs, every
truncation strategy with stride and overflow windows, padding, tensors, decoding, and saving.
"""

from __future__ import annotations

import json
import pickle
import threading

import pytest

transformers = pytest.importorskip("transformers")
pytest.register_assert_rewrite("tokenizer_json_helpers")

import bertkit  # noqa: E402
from bertkit.tokenization import AutoTokenizer, BERTTokenizerFast, TokenizerFast, load_tokenizer  # noqa: E402
from bertkit.tokenization.files import tokenizer_differences, tokenizer_fingerprint  # noqa: E402
from tokenizer_json_helpers import (  # noqa: E402
    EXPECTED_CLASS,
    GENERAL,
    HELDOUT,
    LONG,
    assert_same,
    build_directories,
    plain,
)

transformers.logging.set_verbosity_error()

FULL = dict(return_offsets_mapping=True, return_special_tokens_mask=True, return_length=True)
PAIRS_A = HELDOUT[:10]
PAIRS_B = HELDOUT[10:20]
#: BERTTokenizerFast is Google's BERT: it lower-cases a word-final capital sigma to "ς" (Python's str.lower),
#: where transformers' Rust normalizer writes "σ"; test_bert_final_sigma checks that one difference
GOOGLE_ONLY = [text for text in HELDOUT if "\u03a3" in text]


def texts_for(name: str, texts: list[str]) -> list[str]:
    """``texts`` on which bertkit and transformers must agree for the directory ``name``: all of them but,
    for BERT's directories, those with Google's final-sigma lower-casing."""
    return texts if name in GENERAL else [t if t not in GOOGLE_ONLY else t.replace("\u03a3", "S") for t in texts]


@pytest.fixture(scope="module")
def dirs(tmp_path_factory):
    return build_directories(tmp_path_factory.mktemp("tokenizers"))


@pytest.fixture(scope="module")
def loaded(dirs):
    """name -> (bertkit's tokenizer, transformers' tokenizer), each loaded once."""
    return {name: (load_tokenizer(d), transformers.AutoTokenizer.from_pretrained(d)) for name, d in dirs.items()}


def hf_or_error(call):
    """transformers' result, or the exception it raised (a Rust panic included)."""
    try:
        return call()
    except BaseException as error:  # a PanicException is a BaseException
        if isinstance(error, (KeyboardInterrupt, SystemExit)):
            raise
        return error


def check_call(bk, hf, *args, context: str = "", **kwargs) -> None:
    """bertkit equals transformers on ``(*args, **kwargs)``; where transformers fails, bertkit raises a ValueError.

    transformers 5's ``__call__`` takes no ``truncation_side`` (it ignores one): it is set on its tokenizer.
    """
    hf_kwargs = {k: v for k, v in kwargs.items() if k != "truncation_side"}
    side, hf.truncation_side = hf.truncation_side, kwargs.get("truncation_side", hf.truncation_side)
    try:
        expected = hf_or_error(lambda: hf(*args, **hf_kwargs))
    finally:
        hf.truncation_side = side
    if isinstance(expected, BaseException):
        with pytest.raises(ValueError):
            bk(*args, **kwargs)
        return
    assert_same(expected, bk(*args, **kwargs), context)


# ---------------------------------------------------------------------------- the loader

@pytest.mark.parametrize("name", list(EXPECTED_CLASS))
def test_loader_picks_the_class(dirs, name):
    tok = load_tokenizer(dirs[name])
    assert type(tok).__name__ == EXPECTED_CLASS[name]
    assert type(AutoTokenizer.from_pretrained(dirs[name])) is type(tok)
    assert type(bertkit.AutoTokenizer.from_pretrained(dirs[name])) is type(tok)
    assert bertkit.TokenizerFast is TokenizerFast
    if isinstance(tok, BERTTokenizerFast):  # exactly what BERTTokenizerFast.from_pretrained gives
        direct = BERTTokenizerFast.from_pretrained(dirs[name])
        assert (tok.vocab, tok.special_tokens, repr(tok)) == (direct.vocab, direct.special_tokens, repr(direct))


def test_loader_follows_model_type_without_tokenizer_class(dirs, tmp_path):
    """No tokenizer_class: config.json's model_type decides, as in transformers (XLM-R's recipe is applied)."""
    d = tmp_path / "xlmr"
    d.mkdir()
    (d / "tokenizer.json").write_bytes((dirs["xlmr"] / "tokenizer.json").read_bytes())
    (d / "config.json").write_text(json.dumps({"model_type": "xlm-roberta"}))
    bk, hf = load_tokenizer(d), transformers.AutoTokenizer.from_pretrained(d)
    assert bk.tokenizer_class == "XLMRobertaTokenizer" and bk.cls_token == hf.cls_token == "<s>"
    assert_same(hf(HELDOUT, **FULL), bk(HELDOUT, **FULL))
    (d / "config.json").write_text(json.dumps({"model_type": "distilbert"}))
    (d / "tokenizer.json").write_bytes((dirs["bert"] / "tokenizer.json").read_bytes())
    assert isinstance(load_tokenizer(d), BERTTokenizerFast)


def test_bert_pipeline_without_a_class_is_bert(dirs, tmp_path):
    (tmp_path / "tokenizer.json").write_bytes((dirs["bert"] / "tokenizer.json").read_bytes())
    assert isinstance(load_tokenizer(tmp_path), BERTTokenizerFast)
    (tmp_path / "tokenizer.json").write_bytes((dirs["mpnet"] / "tokenizer.json").read_bytes())
    assert isinstance(load_tokenizer(tmp_path), TokenizerFast)  # WordPiece, but <s> A </s></s> B </s>
    assert isinstance(load_tokenizer(tmp_path / "tokenizer.json"), TokenizerFast)


@pytest.mark.parametrize("name", GENERAL)
def test_pipeline_is_transformers_pipeline(loaded, name):
    """The backend bertkit builds is, component for component, the one transformers builds for the class."""
    bk, hf = loaded[name]
    theirs = json.loads(hf.backend_tokenizer.to_str())
    theirs["truncation"] = theirs["padding"] = None
    assert bk.pipeline_json() == theirs


@pytest.mark.parametrize("name", list(EXPECTED_CLASS))
def test_special_tokens_and_vocabulary(loaded, name):
    bk, hf = loaded[name]
    for attribute in ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token"):
        assert getattr(bk, attribute) == getattr(hf, attribute), attribute
        assert getattr(bk, attribute + "_id") == getattr(hf, attribute + "_id"), attribute
    if name in GENERAL:  # BERTTokenizerFast keeps its own model_max_length default (512) and vocabulary order
        assert bk.all_special_tokens == hf.all_special_tokens
        assert bk.all_special_ids == hf.all_special_ids
        assert bk.model_max_length == hf.model_max_length
        assert bk.clean_up_tokenization_spaces == hf.clean_up_tokenization_spaces
    assert (len(bk), bk.vocab_size, bk.get_vocab()) == (len(hf), hf.vocab_size, hf.get_vocab())
    assert tuple(bk.model_input_names) == tuple(hf.model_input_names)
    assert (bk.padding_side, bk.truncation_side) == (hf.padding_side, hf.truncation_side)
    tokens = hf.convert_ids_to_tokens(list(range(len(hf))))
    assert bk.convert_ids_to_tokens(list(range(len(bk)))) == tokens
    assert bk.convert_tokens_to_ids([*tokens, "no-such-token-\u2603"]) == \
        hf.convert_tokens_to_ids([*tokens, "no-such-token-\u2603"])


def test_distilbert_returns_no_token_type_ids(loaded):
    for name, with_types in (("bert", True), ("electra", True), ("distilbert", False), ("roberta", False),
                             ("modernbert", False)):
        bk, hf = loaded[name]
        assert ("token_type_ids" in bk("a b", "c")) is with_types is ("token_type_ids" in hf("a b", "c")), name


# ---------------------------------------------------------------------------- encoding

@pytest.mark.parametrize("name", list(EXPECTED_CLASS))
def test_single_texts(loaded, name):
    bk, hf = loaded[name]
    texts = texts_for(name, HELDOUT)
    assert_same(hf(texts, **FULL), bk(texts, **FULL), name)
    for text in texts:
        assert_same(hf(text, **FULL), bk(text, **FULL), f"{name}: {text!r}")
        assert bk.tokenize(text) == hf.tokenize(text), text
        assert bk.encode(text) == hf.encode(text), text


@pytest.mark.parametrize("name", list(EXPECTED_CLASS))
def test_pairs(loaded, name):
    bk, hf = loaded[name]
    first, second = texts_for(name, PAIRS_A), texts_for(name, PAIRS_B)
    assert_same(hf(first, second, **FULL), bk(first, second, **FULL), name)
    assert_same(hf(first[0], first[4], **FULL), bk(first[0], first[4], **FULL), name)
    for flag in (True, False):
        check_call(bk, hf, first, second, return_token_type_ids=flag, return_attention_mask=flag, context=name)
    assert bk.encode(first[1], first[2]) == hf.encode(first[1], first[2])
    assert bk.tokenize(first[1], first[2]) == hf.tokenize(first[1], first[2])
    assert_same(hf(first[4], first[5]), bk.encode_plus(first[4], first[5]))  # transformers 5 has no encode_plus
    items = list(zip(first, second))
    assert_same(hf(first, second, padding=True), bk.batch_encode_plus(items, padding=True))
    assert_same(hf(first, second, add_special_tokens=False), bk(first, second, add_special_tokens=False))


def test_bert_final_sigma(loaded):
    """The one held-out difference between BERTTokenizerFast (Google's BERT) and transformers' BertTokenizer."""
    bk, hf = loaded["bert"]
    ours, theirs = bk.tokenize(GOOGLE_ONLY[0]), hf.tokenize(GOOGLE_ONLY[0])
    assert len(ours) == len(theirs)
    assert [(a, b) for a, b in zip(ours, theirs) if a != b] == [("##\u03c2", "##\u03c3")]


@pytest.mark.parametrize("name", GENERAL)
@pytest.mark.parametrize("strategy", ["longest_first", "only_first", "only_second"])
def test_truncation_with_stride_and_overflow(loaded, name, strategy):
    bk, hf = loaded[name]
    if strategy == "longest_first":  # a pair's rows are (windows of text) x (windows of text_pair): no LONG here
        firsts, seconds = [HELDOUT[20], HELDOUT[0], HELDOUT[2], HELDOUT[9]], [HELDOUT[5], HELDOUT[16], HELDOUT[9], ""]
    else:
        firsts, seconds = [LONG, HELDOUT[20], HELDOUT[2], HELDOUT[9]], [HELDOUT[5], LONG, HELDOUT[9], HELDOUT[16]]
    for max_length in (14, 24, 48):
        for stride in (0, 3):
            for side in ("right", "left"):
                context = f"{name} {strategy} max_length={max_length} stride={stride} {side}"
                check_call(bk, hf, firsts, seconds, truncation=strategy, max_length=max_length, stride=stride,
                           return_overflowing_tokens=True, truncation_side=side, **FULL, context=context)
                check_call(bk, hf, firsts, seconds, truncation=strategy, max_length=max_length, stride=stride,
                           return_overflowing_tokens=True, padding="max_length", context=context + " padded")
                if strategy != "only_second":
                    check_call(bk, hf, firsts, truncation=strategy, max_length=max_length, stride=stride,
                               return_overflowing_tokens=True, truncation_side=side, **FULL, context=context)
    check_call(bk, hf, firsts, seconds, truncation=strategy, max_length=20, context=f"{name} {strategy} no overflow")


@pytest.mark.parametrize("name", ["bert", "distilbert"])
def test_bert_directories_truncate_as_hf(loaded, name):
    bk, hf = loaded[name]
    for max_length, stride in ((16, 0), (24, 4)):
        check_call(bk, hf, [LONG, HELDOUT[0]], [HELDOUT[20], LONG], truncation="longest_first",
                   max_length=max_length, stride=stride, return_overflowing_tokens=True, **FULL)


@pytest.mark.parametrize("name", GENERAL)
def test_windows_that_cannot_advance(loaded, name):
    """Where the Rust core panics (a stride as long as the window), bertkit raises a ValueError that says why."""
    bk, hf = loaded[name]
    window = 10 - bk.num_special_tokens_to_add(False)
    assert isinstance(hf_or_error(lambda: hf(LONG, truncation=True, max_length=10, stride=window,
                                             return_overflowing_tokens=True)), BaseException)
    with pytest.raises(ValueError, match=f"stride={window} must be smaller than max_length"):
        bk(LONG, truncation=True, max_length=10, stride=window, return_overflowing_tokens=True)
    check_call(bk, hf, LONG, truncation=True, max_length=10, stride=window - 1, return_overflowing_tokens=True)


@pytest.mark.parametrize("name", GENERAL)
def test_padding_and_tensors(loaded, name):
    bk, hf = loaded[name]
    for options in (dict(padding=True), dict(padding="max_length", max_length=96, truncation=True),
                    dict(padding=True, pad_to_multiple_of=8, padding_side="left"),
                    dict(padding="longest", truncation=True, max_length=20)):
        check_call(bk, hf, HELDOUT, **options, **FULL, context=f"{name} {options}")
        check_call(bk, hf, PAIRS_A, PAIRS_B, **options, context=f"{name} pairs {options}")
    for kind in ("np", "pt"):
        ours, theirs = bk(HELDOUT, padding=True, return_tensors=kind), hf(HELDOUT, padding=True, return_tensors=kind)
        assert set(ours) == set(theirs)
        for key in theirs:
            assert type(ours[key]) is type(theirs[key]) and plain(ours[key]) == plain(theirs[key]), key


@pytest.mark.parametrize("name", [*GENERAL, "bert"])
def test_no_known_limit(loaded, name):
    """transformers writes model_max_length=1e30 for "no limit": truncation=True and padding='max_length'
    without a max_length then do nothing (modernbert has a limit of 64, and is cut to it)."""
    bk, hf = loaded[name]
    check_call(bk, hf, [LONG, HELDOUT[0]], truncation=True, context=name)
    check_call(bk, hf, [LONG, HELDOUT[0]], padding="max_length", context=name)
    check_call(bk, hf, LONG, max_length=10, context=name)


@pytest.mark.parametrize("name", ["roberta", "roberta_ps", "xlmr", "mpnet", "modernbert", "camembert"])
def test_split_into_words(loaded, name):
    bk, hf = loaded[name]
    words = [text.split() for text in HELDOUT if text.split()]
    check_call(bk, hf, words, is_split_into_words=True, **FULL, context=name)
    check_call(bk, hf, words[:5], words[5:10], is_split_into_words=True, padding=True, context=name)


@pytest.mark.parametrize("name", list(EXPECTED_CLASS))
def test_decode(loaded, name):
    bk, hf = loaded[name]
    # BERTTokenizerFast cleans up spaces by default (as transformers 4 did); transformers 5 no longer does
    cleanups = (None, False, True) if name in GENERAL else (True,)
    for ids in hf([*texts_for(name, HELDOUT), LONG])["input_ids"]:
        for skip in (False, True):
            for clean in cleanups:
                assert bk.decode(ids, skip, clean) == hf.decode(ids, skip_special_tokens=skip,
                                                                 clean_up_tokenization_spaces=clean), (ids, clean)
    batch = hf(HELDOUT, padding=True)["input_ids"]
    assert bk.batch_decode(batch, True, cleanups[-1]) == hf.batch_decode(batch, skip_special_tokens=True,
                                                                         clean_up_tokenization_spaces=cleanups[-1])


# ---------------------------------------------------------------------------- saving, pickling, threads

@pytest.mark.parametrize("name", GENERAL)
def test_save_round_trip(loaded, name, tmp_path):
    bk, hf = loaded[name]
    bk.save_pretrained(tmp_path)
    assert {p.name for p in tmp_path.iterdir()} == {"tokenizer.json", "tokenizer_config.json",
                                                     "special_tokens_map.json"}
    again, theirs = load_tokenizer(tmp_path), transformers.AutoTokenizer.from_pretrained(tmp_path)
    assert type(theirs) is type(hf)
    for tok in (again, theirs):
        assert_same(hf(PAIRS_A, PAIRS_B, **FULL), tok(PAIRS_A, PAIRS_B, **FULL), name)
        assert tok.all_special_tokens == hf.all_special_tokens and tok.model_max_length == hf.model_max_length
        assert tuple(tok.model_input_names) == tuple(hf.model_input_names)
    assert tokenizer_fingerprint(again) == tokenizer_fingerprint(bk)


@pytest.mark.parametrize("name", GENERAL)
def test_pickle(loaded, name):
    bk, _ = loaded[name]
    bk(HELDOUT, truncation=True, max_length=9)  # a configured backend travels too
    copy = pickle.loads(pickle.dumps(bk))
    assert_same(bk(PAIRS_A, PAIRS_B, **FULL), copy(PAIRS_A, PAIRS_B, **FULL))
    assert copy.mask_token_id == bk.mask_token_id and copy.decode(copy.encode(HELDOUT[0])) == \
        bk.decode(bk.encode(HELDOUT[0]))


def test_two_threads_encode_with_their_own_settings(loaded):
    bk, _ = loaded["xlmr"]
    jobs = [dict(padding=True, **FULL), dict(truncation="longest_first", max_length=40, stride=3,
                                             return_overflowing_tokens=True, **FULL)]
    expected = [plain(dict(bk(PAIRS_A, PAIRS_B, **job))) for job in jobs]
    failures: list[str] = []

    def work(i: int) -> None:
        for _ in range(40):
            got = bk(PAIRS_A, PAIRS_B, **jobs[i])
            if plain(dict(got)) != expected[i]:
                failures.append(f"thread {i}")
                return
            bk.decode(got["input_ids"][0])

    threads = [threading.Thread(target=work, args=(i,)) for i in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not failures


def test_fingerprints_tell_tokenizers_apart(loaded):
    roberta, xlmr, bert = (loaded[n][0] for n in ("roberta", "xlmr", "bert"))
    same = tokenizer_differences(tokenizer_fingerprint(roberta), tokenizer_fingerprint(roberta), "data", "model")
    assert same == []
    differ = tokenizer_differences(tokenizer_fingerprint(roberta), tokenizer_fingerprint(xlmr), "data", "model")
    assert differ == ["vocab_size 800 (data) vs 801 (model)"]  # XLM-R adds <mask> after its 800 pieces
    kinds = tokenizer_differences(tokenizer_fingerprint(bert), tokenizer_fingerprint(xlmr), "data", "model")
    assert kinds == ["kind BERT WordPiece (data) vs tokenizer.json (model)"]
    ps = loaded["roberta_ps"][0]  # same vocabulary, other pre-tokenizer
    assert tokenizer_differences(tokenizer_fingerprint(roberta), tokenizer_fingerprint(ps), "data", "model") == \
        ["the tokenization pipelines (normalizer, pre-tokenizer, model, post-processor, added tokens) differ"]


# ---------------------------------------------------------------------------- options

def test_file_as_written(dirs):
    """follow_tokenizer_class=False keeps tokenizer.json's own pipeline (XLM-R: Metaspace without
    WhitespaceSplit, whose offsets include the space before a word)."""
    from tokenizers import Tokenizer

    raw = Tokenizer.from_file(str(dirs["xlmr"] / "tokenizer.json"))
    bk = TokenizerFast.from_pretrained(dirs["xlmr"], follow_tokenizer_class=False)
    assert not bk.follows_class
    text = "Anne  Elliot said"
    assert bk(text, return_offsets_mapping=True)["offset_mapping"] == raw.encode(text).offsets
    assert load_tokenizer(dirs["xlmr"])(text, return_offsets_mapping=True)["offset_mapping"] != raw.encode(text).offsets


def test_transformers_4_settings(dirs, tmp_path):
    """Settings as transformers 4 wrote them: special tokens as AddedToken objects, added_tokens_decoder (whose
    flags win over tokenizer.json's), special_tokens_map.json, a model_max_length."""
    from tokenizer_json_helpers import edit_json

    d = _copy(dirs["roberta"], tmp_path / "v4")
    mask = {"__type": "AddedToken", "content": "<mask>", "lstrip": True, "normalized": False, "rstrip": False,
            "single_word": False, "special": True}

    def v4(config):
        config.update(mask_token=mask, model_max_length=40, added_tokens_decoder={
            "3": {"content": "<unk>", "lstrip": False, "normalized": True, "rstrip": True, "single_word": False,
                  "special": True}, "4": {k: v for k, v in mask.items() if k != "__type"}})
        del config["pad_token"]

    edit_json(d / "tokenizer_config.json", v4)
    (d / "special_tokens_map.json").write_text(json.dumps({"pad_token": {"content": "<pad>", "lstrip": False},
                                                           "additional_special_tokens": ["Elliot"]}))
    bk, hf = load_tokenizer(d), transformers.AutoTokenizer.from_pretrained(d)
    assert bk.pad_token == hf.pad_token == "<pad>" and bk.model_max_length == hf.model_max_length == 40
    assert bk.all_special_tokens == hf.all_special_tokens
    assert bk.pipeline_json() == {**json.loads(hf.backend_tokenizer.to_str()), "truncation": None, "padding": None}
    texts = [*HELDOUT, "a <mask> b<mask>c <unk>  <mask>", "Elliot met Elliot"]
    check_call(bk, hf, texts, padding=True, truncation=True, **FULL)


def test_overrides(dirs):
    bk = load_tokenizer(dirs["roberta"], model_max_length=16, padding_side="left")
    assert bk.model_max_length == 16 and bk.padding_side == "left"
    assert len(bk(LONG, truncation=True)["input_ids"]) == 16
    assert bk(["a", "a b c"], padding=True)["attention_mask"][0][0] == 0
    generic = TokenizerFast.from_pretrained(dirs["roberta"], follow_tokenizer_class=False, pad_token=None)
    with pytest.raises(ValueError, match="pad_token"):
        generic(["a", "a b"], padding=True)
    with pytest.raises(TypeError, match="unknown setting"):
        load_tokenizer(dirs["roberta"], do_lower_case=True)


def test_constructor_from_a_tokenizers_object(dirs):
    from tokenizers import Tokenizer

    raw = Tokenizer.from_file(str(dirs["modernbert"] / "tokenizer.json"))
    tok = TokenizerFast(tokenizer_object=raw, cls_token="[CLS]", sep_token="[SEP]", pad_token="[PAD]",
                        mask_token={"content": "[MASK]", "lstrip": True}, extra_special_tokens=["<new special>"])
    assert tok.pad_token_id == raw.token_to_id("[PAD]") and tok.bos_token is None and tok.bos_token_id is None
    assert tok.convert_tokens_to_ids("<new special>") == raw.get_vocab_size()  # added at the end, as HF adds
    assert "<new special>" in tok("x <new special> y").tokens()
    assert "token_type_ids" not in tok("a")
    assert raw.get_vocab_size() == len(tok) - 1  # the object given was copied, not changed


# ---------------------------------------------------------------------------- hostile input

def _copy(src, dst):
    dst.mkdir()
    for p in src.iterdir():
        (dst / p.name).write_bytes(p.read_bytes())
    return dst


@pytest.mark.parametrize("content, message", [
    ("{not json", "not valid JSON"),
    (None, "not valid JSON"),  # cut short
    ("[1, 2]", "not a JSON object"),
    ('{"model": {"type": "SentencePieceBPE", "vocab": {}}}', "does not support"),
    ('{"version": "1.0"}', "no model section"),
    ('{"model": {"type": "BPE", "vocab": {"a": 0}, "merges": [["a", "zz", "q"]]}}', "tokenizers library can"),
])
def test_broken_tokenizer_json(dirs, tmp_path, content, message):
    d = _copy(dirs["modernbert"], tmp_path / "broken")
    path = d / "tokenizer.json"
    path.write_text(path.read_text("utf-8")[:500] if content is None else content, "utf-8")
    with pytest.raises(ValueError, match=message) as info:
        load_tokenizer(d)
    assert str(path) in str(info.value)
    with pytest.raises(ValueError, match=message):
        TokenizerFast(str(path))


def test_post_processor_token_missing_from_vocabulary(dirs, tmp_path):
    from tokenizer_json_helpers import edit_json

    d = _copy(dirs["modernbert"], tmp_path / "no_cls")

    def drop_cls(data):
        data["added_tokens"] = [t for t in data["added_tokens"] if t["content"] != "[CLS]"]
        del data["model"]["vocab"]["[CLS]"]

    edit_json(d / "tokenizer.json", drop_cls)
    edit_json(d / "tokenizer_config.json", lambda c: c.update(cls_token=None))
    with pytest.raises(ValueError, match=r"inserts the special token '\[CLS\]'.*lacks it") as info:
        load_tokenizer(d)
    assert "tokenizer.json" in str(info.value)


def test_recipe_needs_its_special_tokens(dirs, tmp_path):
    from tokenizer_json_helpers import edit_json

    d = _copy(dirs["roberta"], tmp_path / "no_sep")
    edit_json(d / "tokenizer_config.json", lambda c: c.update(sep_token=None))
    with pytest.raises(ValueError, match="inserts the sep_token, but the tokenizer has no sep_token"):
        load_tokenizer(d)


def test_class_and_model_disagree(dirs, tmp_path):
    from tokenizer_json_helpers import edit_json

    d = _copy(dirs["xlmr"], tmp_path / "mismatch")
    edit_json(d / "tokenizer_config.json", lambda c: c.update(tokenizer_class="RobertaTokenizer"))
    with pytest.raises(ValueError, match="holds a Unigram model, but RobertaTokenizer"):
        load_tokenizer(d)
    assert TokenizerFast.from_pretrained(d, follow_tokenizer_class=False).tokenizer_class == "RobertaTokenizer"
    edit_json(d / "tokenizer_config.json", lambda c: c.update(tokenizer_class="BertTokenizerFast"))
    with pytest.raises(ValueError, match="holds a Unigram model, but BertTokenizer"):
        load_tokenizer(d)


def test_missing_files(dirs, tmp_path):
    with pytest.raises(ValueError, match=r"neither tokenizer\.json nor vocab\.txt.*found: nothing"):
        load_tokenizer(tmp_path)
    d = _copy(dirs["roberta"], tmp_path / "roberta")
    (d / "tokenizer.json").unlink()
    (d / "vocab.json").write_text("{}")
    with pytest.raises(ValueError, match=r"no tokenizer\.json, which its tokenizer class RobertaTokenizer needs"):
        load_tokenizer(d)
    with pytest.raises(ValueError, match="neither a tokenizer directory"):
        load_tokenizer(tmp_path / "nowhere")
    (tmp_path / "roberta" / "tokenizer_config.json").write_text("{broken")
    with pytest.raises(ValueError, match=r"tokenizer_config\.json is not valid JSON"):
        load_tokenizer(d)


# ---------------------------------------------------------------------------- components that would panic

def _with_pre_tokenizer_split(d, pattern: str) -> None:
    from tokenizer_json_helpers import edit_json

    split = {"type": "Split", "pattern": {"Regex": pattern}, "behavior": "Isolated", "invert": False}
    edit_json(d / "tokenizer.json",
              lambda data: data.update(pre_tokenizer={"type": "Sequence", "pretokenizers": [{"type": "WhitespaceSplit"},
                                                                                            split]}))


def test_a_catastrophically_backtracking_regex_is_refused_at_load(dirs, tmp_path):
    """``(a+)+$`` loaded, then panicked in Rust on "aaa...b", reported as a truncation / stride problem."""
    d = _copy(dirs["modernbert"], tmp_path / "backtracks")
    _with_pre_tokenizer_split(d, "(a+)+$")
    with pytest.raises(ValueError) as info:
        load_tokenizer(d)
    message = str(info.value)
    assert message.startswith(f"{d / 'tokenizer.json'}: its pre_tokenizer.pretokenizers[1] (Split) regex '(a+)+$' ")
    assert "backtracks catastrophically" in message and "stride" not in message


def test_a_replace_normalizer_with_an_empty_pattern_is_refused_at_load(dirs, tmp_path):
    from tokenizer_json_helpers import edit_json

    d = _copy(dirs["modernbert"], tmp_path / "empty_replace")
    replace = {"type": "Replace", "pattern": {"String": ""}, "content": "x"}
    edit_json(d / "tokenizer.json", lambda data: data.update(normalizer={"type": "Sequence", "normalizers": [
        {"type": "NFC"}, replace]}))
    with pytest.raises(ValueError, match=r"its normalizer\.normalizers\[1\] \(Replace\) has an empty pattern") as info:
        load_tokenizer(d)
    assert str(d / "tokenizer.json") in str(info.value)


def test_a_panic_the_load_probes_miss_names_the_file_and_the_component(dirs, tmp_path):
    d = _copy(dirs["modernbert"], tmp_path / "backtracks_on_pairs")
    _with_pre_tokenizer_split(d, "(ab|ab)+$")  # single-character probes do not backtrack here; "abab...!" does
    tokenizer = load_tokenizer(d)
    assert tokenizer("fine text")["input_ids"]
    with pytest.raises(ValueError) as info:
        tokenizer(["fine text", "ab" * 30 + "!"], truncation=True, max_length=16)
    message = str(info.value)
    assert message.startswith(f"{d / 'tokenizer.json'}: its pre_tokenizer.pretokenizers[1] (Split) panicked on "
                              "text 1 of the batch")
    assert "stride" not in message


def test_the_regexes_of_real_tokenizers_pass_the_probes():
    """GPT-2's and Llama 3's pre-tokenizer regexes (alternations of runs, no nested repetition) are accepted."""
    from bertkit.tokenization.components import check_components

    for pattern in (r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+",
                    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                    r"|\s*[\r\n]+|\s+(?!\S)|\s+"):
        check_components({"pre_tokenizer": {"type": "Split", "pattern": {"Regex": pattern}, "behavior": "Isolated",
                                            "invert": False}}, "tokenizer.json")
