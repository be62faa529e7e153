"""BGE-M3's lexical weights (``bertkit.sentence.bge_m3``) against FlagEmbedding's definition written out here on
HF transformers' ``XLMRobertaModel``: relu(linear(last hidden state)) per position, the max per token id, the cls,
eos, pad and unk ids and zero weights dropped; the matching score the sum of products over shared ids."""

import pytest
import torch

from bertkit.sentence.bge_m3 import BGEM3Lexical, lexical_matching_score
from family_dirs import family_dir

transformers = pytest.importorskip("transformers")

TEXTS = ["Anne Elliot walked the the the walk.", "Persuasion ☃", "", "Captain Wentworth had no fortune. " * 3,
         "Anne Elliot walked the walk, the Captain."]


@pytest.fixture(scope="module")
def m3_dir(tmp_path_factory):
    directory = family_dir(tmp_path_factory.mktemp("m3"), "xlm-roberta", "AutoModel", seed=3)
    torch.manual_seed(5)
    linear = torch.nn.Linear(36, 1)
    torch.nn.init.normal_(linear.weight, std=0.5)  # about half the positions positive, the rest dropped by relu
    torch.save(linear.state_dict(), directory / "sparse_linear.pt")
    return directory


def flag_embedding_weights(directory, text: str, max_length: int = 512) -> dict[str, float]:
    """FlagEmbedding's lexical weights of one text, written out from its definition on HF's model."""
    tokenizer = transformers.AutoTokenizer.from_pretrained(directory)
    model = transformers.XLMRobertaModel.from_pretrained(directory, attn_implementation="eager").eval()
    state = torch.load(directory / "sparse_linear.pt", weights_only=True)
    inputs = tokenizer(text, return_tensors="pt", truncation=True, max_length=max_length)
    with torch.no_grad():
        hidden = model(**inputs).last_hidden_state[0]
    weights = torch.relu(hidden @ state["weight"].T + state["bias"]).squeeze(-1)
    unused = {tokenizer.convert_tokens_to_ids(tokenizer.special_tokens_map[name])
              for name in ("cls_token", "eos_token", "pad_token", "unk_token")}
    result: dict[str, float] = {}
    for weight, token in zip(weights.tolist(), inputs["input_ids"][0].tolist()):
        if token not in unused and weight > 0 and weight > result.get(str(token), 0):
            result[str(token)] = weight
    return result


def test_lexical_weights_equal_flag_embeddings_definition(m3_dir):
    model = BGEM3Lexical(m3_dir, dtype="fp32")
    got = model.encode(TEXTS, batch_size=2)  # batches of different lengths: padding must not count
    unk = transformers.AutoTokenizer.from_pretrained(m3_dir).unk_token_id
    assert unk in model.tokenizer("Persuasion ☃")["input_ids"]  # the unk token occurs and is dropped
    for text, weights in zip(TEXTS, got):
        expected = flag_embedding_weights(m3_dir, text)
        assert weights.keys() == expected.keys()
        torch.testing.assert_close(torch.tensor([weights[k] for k in expected]),
                                   torch.tensor(list(expected.values())), atol=1e-5, rtol=1e-5)
    assert got[2] == {} and 0 < len(got[0]) < len(model.tokenizer(TEXTS[0])["input_ids"])
    assert model.encode(TEXTS[1]) == pytest.approx(got[1]) and model.encode([]) == []


def test_texts_are_truncated_to_max_length_as_flag_embedding_truncates(m3_dir):
    long = "Captain Wentworth had no fortune, and Lady Russell said so. " * 20  # past the model's 64 positions
    for max_length in (8, 1000):
        model = BGEM3Lexical(m3_dir, dtype="fp32", max_length=max_length)
        expected = flag_embedding_weights(m3_dir, long, max_length=min(max_length, 64))
        got = model.encode(long)
        assert got.keys() == expected.keys()
        torch.testing.assert_close(torch.tensor([got[k] for k in expected]), torch.tensor(list(expected.values())),
                                   atol=1e-5, rtol=1e-5)


def test_lexical_matching_score_is_the_sum_of_products_over_shared_ids(m3_dir):
    weights = BGEM3Lexical(m3_dir, dtype="fp32").encode(TEXTS)
    first, last = weights[0], weights[4]
    shared = first.keys() & last.keys()
    assert shared  # shares words with the first text
    assert lexical_matching_score(first, last) == pytest.approx(sum(first[k] * last[k] for k in shared))
    matrix = lexical_matching_score(weights, weights[:2])
    assert matrix.shape == (5, 2) and matrix[2].tolist() == [0, 0]
    assert matrix[4, 0] == pytest.approx(lexical_matching_score(last, first))
    with pytest.raises(TypeError, match="two lists of dicts"):
        lexical_matching_score(first, weights)


def test_bad_sparse_linear_files_are_refused_with_the_file_named(m3_dir, tmp_path):
    import shutil

    bad = tmp_path / "m3"
    shutil.copytree(m3_dir, bad)
    (bad / "sparse_linear.pt").unlink()
    with pytest.raises(FileNotFoundError, match=r"sparse_linear\.pt is missing"):
        BGEM3Lexical(bad)
    torch.save({"weight": torch.zeros(1, 35)}, bad / "sparse_linear.pt")
    with pytest.raises(ValueError, match=r"not a Linear\(36, 1\)"):
        BGEM3Lexical(bad)
    torch.save(torch.nn.Linear(36, 1), bad / "sparse_linear.pt")  # a pickled module: not loaded, not run
    with pytest.raises(ValueError, match="not a tensor state dict"):
        BGEM3Lexical(bad)
