"""bertkit.SparseEncoder against sentence-transformers 6.2's SparseEncoder (the reference): SPLADE directories that
sentence-transformers itself writes from a tiny random odd-sized BERT masked LM (no downloads), loaded by both."""

from __future__ import annotations

import shutil
import warnings
from pathlib import Path

import pytest
import torch

st = pytest.importorskip("sentence_transformers")
transformers = pytest.importorskip("transformers")

from sentence_transformers.base.modules import Router, Transformer  # noqa: E402
from sentence_transformers.sparse_encoder.modules import (  # noqa: E402
    MLMTransformer,
    SparseStaticEmbedding,
    SpladePooling,
)

import bertkit  # noqa: E402
from sparse_dirs import PROMPTS, WORDS, mlm_dir  # noqa: E402

QUERIES = ["how many people live in berlin", "what is the big river", "the cat", "old town", "dog"]
DOCS = ["berlin is a big city on a river", "the cat sat on the mat", "many dogs live in the new town",
        "what river", "the old town of berlin is big and the river is old and the people are many " * 3, "cats"]
TOL = {"atol": 1e-5, "rtol": 1e-5}


@pytest.fixture(scope="module")
def mlm(tmp_path_factory) -> str:
    return mlm_dir(tmp_path_factory.mktemp("mlm"))


def _sparse_dir(mlm: str, out, strategy: str = "max", activation: str = "relu", legacy: bool = True,
                **settings) -> str:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # MLMTransformer's deprecation: the form most published models have
        first = MLMTransformer(mlm) if legacy else Transformer(mlm, transformer_task="fill-mask")
    model = st.SparseEncoder(modules=[first, SpladePooling(strategy, activation)], device="cpu", **settings)
    model.save(str(out))
    return str(out)


@pytest.fixture(scope="module")
def splade(mlm, tmp_path_factory):
    path = _sparse_dir(mlm, tmp_path_factory.mktemp("splade"), prompts=PROMPTS)
    return bertkit.SparseEncoder(path, dtype="fp32"), st.SparseEncoder(path, device="cpu")


def _dense(x):
    return x.to_dense() if x.is_sparse else x


def test_encode_query_and_document_equal_sentence_transformers(splade):
    ours, ref = splade
    for method in ("encode_query", "encode_document", "encode"):
        for texts in (QUERIES, DOCS):
            got, want = getattr(ours, method)(texts, batch_size=2), getattr(ref, method)(texts, batch_size=2)
            assert got.is_sparse and got.shape == (len(texts), len(WORDS))
            assert (_dense(want) > 0).sum() > 3 * len(texts)  # the random head activates words: a real comparison
            torch.testing.assert_close(_dense(got), _dense(want), **TOL)
    # the prompts matter: a query is not encoded as the same text without its prompt
    assert not torch.allclose(_dense(ours.encode_query(QUERIES)), _dense(ours.encode(QUERIES)))


def test_max_active_dims_dense_and_list_outputs(splade):
    ours, ref = splade
    got = ours.encode_document(DOCS, max_active_dims=4, convert_to_sparse_tensor=False)
    want = ref.encode_document(DOCS, max_active_dims=4, convert_to_sparse_tensor=False)
    assert not got.is_sparse and ((got != 0).sum(1) <= 4).all()
    torch.testing.assert_close(got, want, **TOL)
    rows = ours.encode_query(QUERIES, convert_to_tensor=False, max_active_dims=3)
    torch.testing.assert_close(torch.stack([_dense(r) for r in rows]),
                               _dense(ref.encode_query(QUERIES, max_active_dims=3)), **TOL)
    single = ours.encode_query(QUERIES[0])
    assert single.shape == (len(WORDS),)
    torch.testing.assert_close(_dense(single), _dense(ref.encode_query(QUERIES[0])), **TOL)
    with pytest.raises(ValueError, match="max_active_dims must be a positive integer"):
        ours.encode(DOCS, max_active_dims=0)


def test_similarity_decode_and_sparsity(splade):
    ours, ref = splade
    q, d = ours.encode_query(QUERIES), ours.encode_document(DOCS)
    torch.testing.assert_close(ours.similarity(q, d), ref.similarity(ref.encode_query(QUERIES),
                                                                      ref.encode_document(DOCS)), **TOL)
    assert ours.similarity_fn_name == "dot"
    for top_k in (None, 3):
        got, want = ours.decode(d, top_k=top_k), ref.decode(ref.encode_document(DOCS), top_k=top_k)
        assert [[t for t, _ in row] for row in got] == [[t for t, _ in row] for row in want]
        torch.testing.assert_close(torch.tensor([w for row in got for _, w in row]),
                                   torch.tensor([w for row in want for _, w in row]), **TOL)
    assert ours.decode(d[0], top_k=2) == ours.decode(d, top_k=2)[0]
    ratio = ours.sparsity(d)
    assert ratio["active_dims"] == pytest.approx(ref.sparsity(ref.encode_document(DOCS))["active_dims"])
    with pytest.raises(ValueError, match="top_k must be a positive integer"):
        ours.decode(d, top_k=0)


@pytest.mark.parametrize(("strategy", "activation", "legacy"), [("sum", "relu", True), ("max", "log1p_relu", False)])
def test_pooling_variants_and_saved_settings(mlm, tmp_path, strategy, activation, legacy):
    """Sum pooling, OpenSearch's log1p_relu, the fill-mask Transformer form of sentence-transformers >= 6, and a
    directory's own max_active_dims."""
    path = _sparse_dir(mlm, tmp_path / "m", strategy, activation, legacy, max_active_dims=5)
    ours, ref = bertkit.SparseEncoder(path, dtype="fp32"), st.SparseEncoder(path, device="cpu")
    assert ours.max_active_dims == 5
    got = ours.encode_document(DOCS)
    assert ((_dense(got) != 0).sum(1) <= 5).all()
    torch.testing.assert_close(_dense(got), _dense(ref.encode_document(DOCS)), **TOL)
    torch.testing.assert_close(_dense(ours.encode(DOCS, max_active_dims=40)),
                               _dense(ref.encode(DOCS, max_active_dims=40)), **TOL)
    saved = st.SparseEncoder(str(ours.save(tmp_path / "saved")), device="cpu")
    assert saved.max_active_dims == 5 and saved[-1].pooling_strategy == strategy
    torch.testing.assert_close(_dense(saved.encode_document(DOCS)), _dense(got), **TOL)


def test_wrong_directories_say_which_class(mlm, splade, tmp_path):
    with pytest.raises(ValueError, match=r"bertkit\.SentenceTransformer"):
        bertkit.SparseEncoder(_dense_dir(mlm, tmp_path / "dense"))
    with pytest.raises(ValueError, match=r"neither a sentence-transformers directory .* nor a checkpoint"):
        bertkit.SparseEncoder(tmp_path)
    with pytest.raises(ValueError, match=r"bertkit\.SparseEncoder"):
        bertkit.SentenceTransformer(str(splade[0].layout.transformer))


def test_a_plain_masked_lm_loads_as_splade_and_a_base_without_the_head_is_refused(mlm, tmp_path):
    """A masked-LM checkpoint without modules.json is SPLADE with max pooling, as sentence-transformers reads it; a
    bare encoder (no MLM head) — alone or as a directory's MLMTransformer — is one line naming what to pass."""
    ours, ref = bertkit.SparseEncoder(mlm, dtype="fp32"), st.SparseEncoder(mlm, device="cpu")
    torch.testing.assert_close(_dense(ours.encode_document(DOCS)), _dense(ref.encode_document(DOCS)), **TOL)
    bare = tmp_path / "bare"
    transformers.BertModel.from_pretrained(mlm).save_pretrained(bare)
    transformers.AutoTokenizer.from_pretrained(mlm).save_pretrained(bare)
    with pytest.raises(ValueError, match=r"bare has no masked-LM head .*pass a checkpoint with its MLM head"):
        bertkit.SparseEncoder(bare)
    sparse = Path(_sparse_dir(mlm, tmp_path / "sparse"))
    for name in ("config.json", "model.safetensors"):  # its MLMTransformer folder now holds the bare encoder
        shutil.copy(bare / name, sparse / name)
    with pytest.raises(ValueError, match=r"sparse has no masked-LM head"):
        bertkit.SparseEncoder(sparse)


def test_empty_input_and_default_dtype(splade):
    """No texts: an empty ``[0, V]`` sparse tensor. The default ``dtype="auto"`` (bf16 where the hardware computes
    it natively) stays close to the exact vectors."""
    ours, ref = splade
    out = ours.encode([])
    assert out.is_sparse and out.shape == (0, len(WORDS))
    auto = bertkit.SparseEncoder(str(ours.layout.transformer))
    torch.testing.assert_close(_dense(auto.encode_document(DOCS)), _dense(ref.encode_document(DOCS)),
                               atol=0.05, rtol=0.05)
    bf16 = bertkit.SparseEncoder(str(ours.layout.transformer), dtype="bf16")  # what auto picks on bf16 hardware
    assert bf16.dtype_choice.name == "bf16" and bf16.routes["main"].mlm.cls.predictions.bias.dtype == torch.bfloat16
    got = bf16.encode_document(DOCS, convert_to_sparse_tensor=False)
    assert got.dtype == torch.float32
    torch.testing.assert_close(got, _dense(ref.encode_document(DOCS)), atol=0.1, rtol=0.05)


def _dense_dir(mlm: str, out) -> str:
    st.SentenceTransformer(mlm, device="cpu").save(str(out))
    return str(out)



def _router_dir(mlm: str, out, **settings) -> str:
    """An inference-free model: random static weights (some negative: max_active_dims keeps magnitudes) for
    queries, SPLADE for documents."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        document = [MLMTransformer(mlm), SpladePooling("max")]
    torch.manual_seed(1)
    static = SparseStaticEmbedding(tokenizer=transformers.AutoTokenizer.from_pretrained(mlm),
                                   weight=torch.rand(len(WORDS)) * 3 - 0.5)
    router = Router.for_query_document(query_modules=[static], document_modules=document)
    st.SparseEncoder(modules=[router], device="cpu", **settings).save(str(out))
    return str(out)


@pytest.fixture(scope="module")
def inference_free(mlm, tmp_path_factory):
    path = _router_dir(mlm, tmp_path_factory.mktemp("router"), prompts=PROMPTS)
    return bertkit.SparseEncoder(path, dtype="fp32"), st.SparseEncoder(path, device="cpu")


def test_router_static_queries_and_splade_documents(inference_free):
    ours, ref = inference_free
    queries = [*QUERIES, "the the cat cat", "berlin " * 70]  # repeated tokens count once; no truncation
    for method, texts in (("encode_query", queries), ("encode_document", DOCS), ("encode", DOCS)):
        got, want = getattr(ours, method)(texts, batch_size=3), getattr(ref, method)(texts, batch_size=3)
        assert (_dense(want) != 0).sum() > 2 * len(texts)
        torch.testing.assert_close(_dense(got), _dense(want), **TOL)
    got = ours.encode_query(queries, max_active_dims=2, convert_to_sparse_tensor=False)
    torch.testing.assert_close(got, ref.encode_query(queries, max_active_dims=2, convert_to_sparse_tensor=False),
                               **TOL)
    torch.testing.assert_close(ours.similarity(ours.encode_query(QUERIES), ours.encode_document(DOCS)),
                               ref.similarity(ref.encode_query(QUERIES), ref.encode_document(DOCS)), **TOL)
    assert [t for t, _ in ours.decode(ours.encode_query(QUERIES[0]))] == \
        [t for t, _ in ref.decode(ref.encode_query(QUERIES[0]))]
    with pytest.raises(ValueError, match="task 'passage' has no route"):
        ours.encode(DOCS, task="passage")


def test_router_with_a_query_side_of_another_vocabulary_is_refused(mlm, tmp_path):
    path = _router_dir(mlm, tmp_path / "router")
    static = next((tmp_path / "router").glob("query_0_*"))
    from safetensors.torch import save_file

    save_file({"weight": torch.ones(len(WORDS) + 3)}, str(static / "model.safetensors"))
    with pytest.raises(ValueError, match="vocabularies of different sizes"):
        bertkit.SparseEncoder(path)
    save_file({"weight": torch.ones(len(WORDS) - 3)}, str(static / "model.safetensors"))
    with pytest.raises(ValueError, match="the static weights cover"):
        bertkit.SparseEncoder(path)


@pytest.mark.parametrize("kind", ["splade", "inference_free"])
def test_saved_directory_loads_in_both_with_the_same_vectors(kind, request, tmp_path):
    ours, ref = request.getfixturevalue(kind)
    saved = ours.save(tmp_path / "saved")
    again, theirs = bertkit.SparseEncoder(saved, dtype="fp32"), st.SparseEncoder(str(saved), device="cpu")
    assert theirs.prompts == ref.prompts
    for method, texts in (("encode_query", QUERIES), ("encode_document", DOCS)):
        want = _dense(getattr(ref, method)(texts))
        torch.testing.assert_close(_dense(getattr(theirs, method)(texts)), want, **TOL)
        torch.testing.assert_close(_dense(getattr(again, method)(texts)), want, **TOL)


FAMILIES = {  # HF masked-LM classes and configs of the families whose MLM head bertkit loads
    "distilbert": ("DistilBertForMaskedLM", dict(dim=36, n_heads=3, hidden_dim=37, n_layers=2), "DistilBertConfig"),
    "roberta": ("RobertaForMaskedLM", dict(hidden_size=36, num_attention_heads=3, intermediate_size=37,
                                           num_hidden_layers=2, pad_token_id=0), "RobertaConfig"),
    "modernbert": ("ModernBertForMaskedLM", dict(hidden_size=36, num_attention_heads=3, intermediate_size=37,
                                                 num_hidden_layers=2, pad_token_id=0, cls_token_id=2, sep_token_id=3,
                                                 bos_token_id=2, eos_token_id=3, global_attn_every_n_layers=1),
                   "ModernBertConfig"),
}


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_other_families_masked_lm_heads(family, tmp_path):
    model_class, settings, config_class = FAMILIES[family]
    torch.manual_seed(0)
    config = getattr(transformers, config_class)(vocab_size=len(WORDS), max_position_embeddings=70,
                                                 initializer_range=0.3, **settings)
    getattr(transformers, model_class)(config).save_pretrained(tmp_path / "mlm")
    (tmp_path / "vocab.txt").write_text("\n".join(WORDS) + "\n")
    transformers.BertTokenizerFast(str(tmp_path / "vocab.txt")).save_pretrained(tmp_path / "mlm")
    path = _sparse_dir(str(tmp_path / "mlm"), tmp_path / "sparse", prompts=PROMPTS)
    ours, ref = bertkit.SparseEncoder(path, dtype="fp32"), st.SparseEncoder(path, device="cpu")
    got, want = _dense(ours.encode_document(DOCS[:4])), _dense(ref.encode_document(DOCS[:4]))
    assert (want > 0).sum() > 8
    torch.testing.assert_close(got, want, **TOL)


def test_csr_autoencoder_over_a_dense_model(mlm, tmp_path):
    """CSR: a dense Transformer + Pooling under a SparseAutoEncoder (standardised input, top-k latents); its k is
    the default max_active_dims, and a larger one at encode time keeps more latents, as in the reference."""
    from sentence_transformers.sentence_transformer.modules import Pooling
    from sentence_transformers.sparse_encoder.modules import SparseAutoEncoder

    torch.manual_seed(2)
    autoencoder = SparseAutoEncoder(36, hidden_dim=47, k=5, normalize=True)
    for parameter in autoencoder.parameters():
        parameter.data.normal_(0, 0.5)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        modules = [Transformer(mlm), Pooling(36, "mean"), autoencoder]
    path = str(tmp_path / "csr")
    st.SparseEncoder(modules=modules, device="cpu", prompts=PROMPTS).save(path)
    ours, ref = bertkit.SparseEncoder(path, dtype="fp32"), st.SparseEncoder(path, device="cpu")
    assert ours.max_active_dims == 5 and ours.get_sentence_embedding_dimension() == 47
    for options in ({}, {"max_active_dims": 9}):
        got, want = _dense(ours.encode_document(DOCS, **options)), _dense(ref.encode_document(DOCS, **options))
        assert (want != 0).sum() > 2 * len(DOCS)
        torch.testing.assert_close(got, want, **TOL)
    saved = st.SparseEncoder(str(ours.save(tmp_path / "saved")), device="cpu")
    torch.testing.assert_close(_dense(saved.encode_query(QUERIES)), _dense(ref.encode_query(QUERIES)), **TOL)
    with pytest.raises(ValueError, match=r"bertkit\.SparseEncoder"):
        bertkit.SentenceTransformer(path)


def _csr_modules(mlm: str, seed: int, pooling: str = "mean", include_prompt: bool = True) -> list:
    from sentence_transformers.sentence_transformer.modules import Pooling
    from sentence_transformers.sparse_encoder.modules import SparseAutoEncoder

    torch.manual_seed(seed)
    autoencoder = SparseAutoEncoder(36, hidden_dim=47, k=5, normalize=seed % 2 == 0)
    for parameter in autoencoder.parameters():
        parameter.data.normal_(0, 0.5)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return [Transformer(mlm), Pooling(36, pooling, include_prompt=include_prompt), autoencoder]


def test_csr_pooling_without_the_prompt(mlm, tmp_path):
    """include_prompt=False: CSR's pooling leaves the prompt's tokens out, counted as sentence-transformers counts
    them; with and without a prompt, and a saved copy keeps the setting."""
    path = str(tmp_path / "csr")
    st.SparseEncoder(modules=_csr_modules(mlm, 4, include_prompt=False), device="cpu", prompts=PROMPTS).save(path)
    ours, ref = bertkit.SparseEncoder(path, dtype="fp32"), st.SparseEncoder(path, device="cpu")
    for method in ("encode_query", "encode_document", "encode"):
        got, want = _dense(getattr(ours, method)(DOCS, batch_size=4)), _dense(getattr(ref, method)(DOCS))
        assert (want != 0).sum() > 2 * len(DOCS)
        torch.testing.assert_close(got, want, **TOL)
    saved = st.SparseEncoder(str(ours.save(tmp_path / "saved")), device="cpu")
    torch.testing.assert_close(_dense(saved.encode_query(QUERIES)), _dense(ref.encode_query(QUERIES)), **TOL)


def test_router_of_csr_routes_saves_for_both(mlm, tmp_path):
    """A Router whose query and document sides are CSR pipelines (different poolings and autoencoders) loads, and
    saves a directory that sentence-transformers and bertkit load with the same vectors."""
    router = Router.for_query_document(query_modules=_csr_modules(mlm, 5, "cls"),
                                       document_modules=_csr_modules(mlm, 6, "mean", include_prompt=False))
    path = str(tmp_path / "router")
    st.SparseEncoder(modules=[router], device="cpu", prompts=PROMPTS).save(path)
    ours, ref = bertkit.SparseEncoder(path, dtype="fp32"), st.SparseEncoder(path, device="cpu")
    saved = ours.save(tmp_path / "saved")
    again, theirs = bertkit.SparseEncoder(saved, dtype="fp32"), st.SparseEncoder(str(saved), device="cpu")
    for method, texts in (("encode_query", QUERIES), ("encode_document", DOCS)):
        want = _dense(getattr(ref, method)(texts))
        assert (want != 0).sum() > 2 * len(texts)
        for model in (ours, again, theirs):
            torch.testing.assert_close(_dense(getattr(model, method)(texts)), want, **TOL)


class _CountingHead(torch.nn.Module):
    """An MLM head that records how many tokens each call projects."""

    def __init__(self, hidden: int, vocab: int):
        super().__init__()
        torch.manual_seed(3)
        self.linear = torch.nn.Linear(hidden, vocab)
        self.calls: list[int] = []

    def forward(self, x):
        self.calls.append(x.shape[0])
        return self.linear(x)


@pytest.mark.parametrize(("strategy", "activation"), [("max", "relu"), ("sum", "relu"), ("max", "log1p_relu"),
                                                      ("sum", "log1p_relu")])
def test_fast_pooling_projects_real_tokens_only_and_equals_the_reference(strategy, activation):
    """SpladePooling.project: the head sees only real tokens, at most chunk_tokens at a time; vectors and gradients
    equal sentence-transformers' module on the full [B, L, V] logits (padding rows included)."""
    from bertkit.sentence.modules import SpladePooling as Ours

    torch.manual_seed(0)
    hidden = torch.randn(4, 7, 5, requires_grad=True)
    mask = torch.tensor([[1] * 7, [1] * 3 + [0] * 4, [0] * 7, [1] * 5 + [0] * 2])
    head = _CountingHead(5, 11)
    reference = SpladePooling(strategy, activation).train()  # training mode: no in-place ops, a gradient
    want = reference({"token_embeddings": head(hidden), "attention_mask": mask})["sentence_embedding"]
    want_grads = torch.autograd.grad(want.square().sum(), [hidden, head.linear.weight])
    for chunk in (1, 4, None):
        head.calls.clear()
        got = Ours(strategy, activation).project(hidden, mask, head, 11, chunk_tokens=chunk)
        assert sum(head.calls) == int(mask.sum()) and max(head.calls) <= (chunk or 15)
        torch.testing.assert_close(got, want, **TOL)
        for g, w in zip(torch.autograd.grad(got.square().sum(), [hidden, head.linear.weight]), want_grads):
            torch.testing.assert_close(g, w, **TOL)
    with torch.inference_mode():  # in place: the same numbers
        torch.testing.assert_close(Ours(strategy, activation).project(hidden, mask, head, 11, 3), want.detach(),
                                   **TOL)
    logits = head(hidden).detach()
    torch.testing.assert_close(Ours(strategy, activation)(logits, mask), reference.eval()(
        {"token_embeddings": logits.clone(), "attention_mask": mask})["sentence_embedding"], **TOL)
    with torch.inference_mode():  # bf16 (dtype="auto" on bf16 hardware): float32 vectors, the all-padding row 0
        half = head.linear.bfloat16()
        got = Ours(strategy, activation).project(hidden.detach().bfloat16(), mask, half, 11, chunk_tokens=4)
        assert got.dtype == torch.float32 and not got[2].any()
        torch.testing.assert_close(got, Ours(strategy, activation)(half(hidden.detach().bfloat16()), mask))


def test_training_through_forward_equals_sentence_transformers_gradients(splade):
    """sparse-train trains through SparseEncoder.forward: its vectors and the head's and embeddings' gradients
    equal sentence-transformers' in training mode (fp32)."""
    ours, ref = splade
    trainable = bertkit.SparseEncoder(str(ours.layout.transformer), dtype="fp32", optimize=False).train()
    ref.train()
    try:
        features = ref.tokenize(DOCS)
        want = ref(dict(features))["sentence_embedding"]
        weights = torch.linspace(-1, 2, want.shape[1])
        (want * weights).square().sum().backward()
        got = trainable(features["input_ids"], features["attention_mask"], features.get("token_type_ids"))
        (got * weights).square().sum().backward()
    finally:
        ref.eval()
    torch.testing.assert_close(got, want, **TOL)
    hf, mlm = ref[0].auto_model, trainable.routes["main"].mlm
    pairs = [(mlm.cls.predictions.transform.dense.weight, hf.cls.predictions.transform.dense.weight),
             (mlm.bert.embeddings.word_embeddings.weight, hf.bert.embeddings.word_embeddings.weight)]
    for mine, theirs in pairs:
        torch.testing.assert_close(mine.grad, theirs.grad, atol=1e-4, rtol=1e-4)
        theirs.grad = None
