"""BGE-M3's three outputs (``bertkit.sentence.bge_m3.BGEM3``) against FlagEmbedding's definitions written out here on
HF transformers' ``XLMRobertaModel``: the dense vector the normalised CLS state; the ColBERT vectors
``normalize(colbert_linear(state))`` of every token after CLS; the ColBERT score the mean over query vectors of
their best dot product with a passage vector; ``compute_score``'s modes the weighted means of the three scores."""

import shutil

import numpy as np
import pytest
import torch

from bertkit.sentence.bge_m3 import BGEM3, BGEM3Lexical, colbert_score, fused_scores, lexical_matching_score
from family_dirs import family_dir

transformers = pytest.importorskip("transformers")

TEXTS = ["Anne Elliot walked the the the walk.", "Persuasion ☃", "", "Captain Wentworth had no fortune. " * 3,
         "Anne Elliot walked the walk, the Captain."]
COLBERT_DIM = 23  # odd, and not the hidden size (36): a projection FlagEmbedding trains with colbert_dim=23


@pytest.fixture(scope="module")
def m3_dir(tmp_path_factory):
    directory = family_dir(tmp_path_factory.mktemp("m3"), "xlm-roberta", "AutoModel", seed=3)
    torch.manual_seed(5)
    sparse = torch.nn.Linear(36, 1)
    torch.nn.init.normal_(sparse.weight, std=0.5)
    torch.save(sparse.state_dict(), directory / "sparse_linear.pt")
    torch.save(torch.nn.Linear(36, COLBERT_DIM).state_dict(), directory / "colbert_linear.pt")
    return directory


@pytest.fixture(scope="module")
def reference(m3_dir):
    """FlagEmbedding's outputs of one text (unbatched: no padding), written out from its definitions."""
    tokenizer = transformers.AutoTokenizer.from_pretrained(m3_dir)
    model = transformers.XLMRobertaModel.from_pretrained(m3_dir, attn_implementation="eager").eval()
    sparse = torch.load(m3_dir / "sparse_linear.pt", weights_only=True)
    colbert = torch.load(m3_dir / "colbert_linear.pt", weights_only=True)
    unused = {tokenizer.cls_token_id, tokenizer.eos_token_id, tokenizer.pad_token_id, tokenizer.unk_token_id}

    def outputs(text: str, max_length: int = 512) -> dict:
        inputs = tokenizer(text, return_tensors="pt", truncation=True, max_length=max_length)
        with torch.no_grad():
            hidden = model(**inputs).last_hidden_state[0]
        weights = torch.relu(hidden @ sparse["weight"].T + sparse["bias"]).squeeze(-1)
        lexical: dict[str, float] = {}
        for weight, token in zip(weights.tolist(), inputs["input_ids"][0].tolist()):
            if token not in unused and weight > 0 and weight > lexical.get(str(token), 0):
                lexical[str(token)] = weight
        vecs = torch.nn.functional.normalize(hidden[1:] @ colbert["weight"].T + colbert["bias"], dim=-1)
        return {"dense": torch.nn.functional.normalize(hidden[0], dim=-1), "lexical": lexical, "colbert": vecs}

    return outputs


def flag_colbert_score(q: torch.Tensor, p: torch.Tensor) -> float:
    return float(torch.einsum("in,jn->ij", q, p).max(-1).values.sum() / q.shape[0])


def test_encode_gives_flag_embeddings_three_outputs(m3_dir, reference):
    model = BGEM3(m3_dir, dtype="fp32")
    got = model.encode(TEXTS, batch_size=2)  # batches of different lengths: padding must not count
    assert got["dense_vecs"].shape == (5, 36) and len(got["colbert_vecs"]) == 5
    for i, text in enumerate(TEXTS):
        expected = reference(text)
        torch.testing.assert_close(torch.from_numpy(got["dense_vecs"][i]), expected["dense"], atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(torch.from_numpy(got["colbert_vecs"][i]), expected["colbert"], atol=1e-5,
                                   rtol=1e-5)
        assert got["lexical_weights"][i].keys() == expected["lexical"].keys()
        torch.testing.assert_close(torch.tensor([got["lexical_weights"][i][k] for k in expected["lexical"]]),
                                   torch.tensor(list(expected["lexical"].values())), atol=1e-5, rtol=1e-5)
    assert got["colbert_vecs"][2].shape == (1, COLBERT_DIM)  # an empty text keeps its </s> vector
    one = model.encode(TEXTS[1])
    assert one["dense_vecs"].shape == (36,) and one["colbert_vecs"].shape[1] == COLBERT_DIM
    assert one["lexical_weights"] == pytest.approx(got["lexical_weights"][1])
    empty = model.encode([])
    assert empty["dense_vecs"].shape == (0, 36) and empty["lexical_weights"] == empty["colbert_vecs"] == []
    import bertkit

    assert bertkit.BGEM3 is BGEM3  # the root exports it


def test_scores_equal_flag_embeddings_formulas(m3_dir, reference):
    model = BGEM3(m3_dir, dtype="fp32")
    pairs = [(TEXTS[0], TEXTS[4]), (TEXTS[1], TEXTS[3]), (TEXTS[2], TEXTS[0]), (TEXTS[4], TEXTS[1])]
    for weights in ((1.0, 1.0, 1.0), (0.4, 0.2, 0.4)):  # FlagEmbedding's default; its README's
        got = model.compute_score(pairs, batch_size=3, weights=weights, max_passage_length=20)
        assert set(got) == {"colbert", "sparse", "dense", "sparse+dense", "colbert+sparse+dense"}
        for i, (query, passage) in enumerate(pairs):
            q, p = reference(query), reference(passage, max_length=20)
            dense = float(q["dense"] @ p["dense"])
            sparse = sum(w * p["lexical"][k] for k, w in q["lexical"].items() if k in p["lexical"])
            colbert = flag_colbert_score(q["colbert"], p["colbert"])
            w = weights
            expected = {"colbert": colbert, "sparse": sparse, "dense": dense,
                        "sparse+dense": (sparse * w[1] + dense * w[0]) / (w[1] + w[0]),
                        "colbert+sparse+dense": (colbert * w[2] + sparse * w[1] + dense * w[0]) / sum(w)}
            torch.testing.assert_close(torch.tensor([got[m][i] for m in expected], dtype=torch.float64),
                                       torch.tensor(list(expected.values()), dtype=torch.float64),
                                       atol=1e-5, rtol=1e-5)
    assert got["sparse"][0] > 0 and got["colbert"][0] != got["dense"][0]  # shared words; distinct scores
    one = model.compute_score((TEXTS[0], TEXTS[4]), max_passage_length=20, weights=weights)  # one pair: floats
    assert one == pytest.approx({mode: scores[0] for mode, scores in got.items()}, abs=1e-6)
    assert model.compute_score([]) == {mode: [] for mode in got}
    vecs = model.encode([TEXTS[0], TEXTS[4]])["colbert_vecs"]
    assert colbert_score(vecs[0], vecs[1]) == pytest.approx(flag_colbert_score(*map(torch.from_numpy, vecs)))


def test_one_encoder_pass_per_batch_gives_all_outputs(m3_dir):
    calls = []
    for model in (BGEM3(m3_dir, dtype="fp32"), BGEM3Lexical(m3_dir, dtype="fp32")):
        calls.clear()
        handle = model.bert.register_forward_hook(lambda *args: calls.append(1))
        model.encode(TEXTS, batch_size=2)
        handle.remove()
        assert len(calls) == 3  # five texts in batches of two: one pass each, all heads from it
    lexical = BGEM3Lexical(m3_dir, dtype="fp32")
    assert lexical.colbert_linear is None  # the lexical model loads no projection it does not use
    full = BGEM3(m3_dir, dtype="fp32").encode(TEXTS)["lexical_weights"]
    for a, b in zip(lexical.encode(TEXTS), full):
        assert a == pytest.approx(b)


def test_a_bge_m3_directory_is_a_multi_vector_model_with_its_colbert_vecs(m3_dir, reference, tmp_path):
    import bertkit

    ours, m3 = bertkit.MultiVectorEncoder(m3_dir, dtype="fp32"), BGEM3(m3_dir, dtype="fp32")
    expected = m3.encode(TEXTS, batch_size=2)["colbert_vecs"]
    for method in ("encode_document", "encode_query"):
        got = getattr(ours, method)(TEXTS, batch_size=2)
        for text, vectors, want in zip(TEXTS, got, expected):
            torch.testing.assert_close(vectors, torch.from_numpy(want), atol=1e-5, rtol=1e-5)
            torch.testing.assert_close(vectors, reference(text)["colbert"], atol=1e-5, rtol=1e-5)
    scores = ours.similarity(ours.encode_query(TEXTS[:2]), ours.encode_document(TEXTS[3:]))
    torch.testing.assert_close(scores, torch.tensor([[colbert_score(q, p) for p in expected[3:]]
                                                     for q in expected[:2]]), atol=1e-5, rtol=1e-5)
    assert ours.similarity_fn_name == "meanmaxsim" and ours.get_sentence_embedding_dimension() == COLBERT_DIM
    st = pytest.importorskip("sentence_transformers")
    saved = st.MultiVectorEncoder(str(ours.save(tmp_path / "saved")), device="cpu")  # an ST6 directory: same vectors
    for a, b in zip(ours.encode_document(TEXTS), saved.encode_document(TEXTS)):
        torch.testing.assert_close(a, b.float(), atol=1e-5, rtol=1e-5)
    shutil.copytree(m3_dir, tmp_path / "bad")
    torch.save({"weight": torch.zeros(4, 35)}, tmp_path / "bad" / "colbert_linear.pt")
    with pytest.raises(ValueError, match=r"colbert_linear\.pt holds .* not a Linear\(36, n\)"):
        bertkit.MultiVectorEncoder(tmp_path / "bad")


def test_fused_scores_and_colbert_score_refuse_bad_input():
    with pytest.raises(ValueError, match="weights: three non-negative numbers"):
        fused_scores(np.ones(2), np.ones(2), np.ones(2), (1.0, 1.0))
    with pytest.raises(ValueError, match="colbert_score takes two non-empty"):
        colbert_score(np.ones((3, 4)), np.ones((2, 5)))
    with pytest.raises(ValueError, match="colbert_score takes two non-empty"):
        colbert_score(np.ones((0, 4)), np.ones((2, 4)))
    assert lexical_matching_score({"5": 2.0}, {"5": 0.5, "6": 1.0}) == 1.0


@pytest.mark.parametrize("content, message", [
    ({"weight": torch.zeros(COLBERT_DIM, 35), "bias": torch.zeros(COLBERT_DIM)}, r"not a Linear\(36, n\)"),
    ({"weight": torch.zeros(COLBERT_DIM, 36), "bias": torch.zeros(4)}, r"not a Linear\(36, n\)"),
    ({"weight": torch.zeros(COLBERT_DIM, 36), "scale": torch.zeros(1)}, r"not a Linear\(36, n\)"),
    (torch.zeros(COLBERT_DIM, 36), r"not a Linear\(36, n\)"),
    (torch.nn.Linear(36, COLBERT_DIM), "not a tensor state dict"),  # a pickled module: not loaded, not run
])
def test_bad_colbert_linear_files_are_refused_with_the_file_named(m3_dir, tmp_path, content, message):
    bad = tmp_path / "m3"
    shutil.copytree(m3_dir, bad)
    torch.save(content, bad / "colbert_linear.pt")
    with pytest.raises(ValueError, match=r"colbert_linear\.pt (is|holds)") as error:
        BGEM3(bad)
    assert "\n" not in str(error.value) and error.match(message)
    assert BGEM3Lexical(bad).encode(TEXTS[0])  # the lexical model never reads the projection


def test_missing_heads_are_named(m3_dir, tmp_path):
    bad = tmp_path / "m3"
    shutil.copytree(m3_dir, bad)
    (bad / "colbert_linear.pt").unlink()
    with pytest.raises(FileNotFoundError, match=r"colbert_linear\.pt is missing"):
        BGEM3(bad)
    (bad / "colbert_linear.pt").write_bytes(b"\x80\x02truncated")
    with pytest.raises(ValueError, match=r"colbert_linear\.pt is not a tensor state dict"):
        BGEM3(bad)
    with pytest.raises(ValueError, match="heads: 'dense' is not a BGE-M3 head"):
        BGEM3(m3_dir, heads=("dense",))
    with pytest.raises(TypeError, match=r"pairs: pass a \(query, passage\) pair of strings or a list of them"):
        BGEM3(m3_dir).compute_score([("a", "b", "c")])
