"""inspect_source on learned-sparse directories: sentence-transformers 6.2's sparse encoders (SPLADE, an
inference-free Router, CSR) are the ``sparse-embeddings`` task that bertkit.SparseEncoder loads; a BGE-M3 directory
stays a dense embedding model whose sparse kind is ``bge-m3``."""

import pytest

pytest.importorskip("sentence_transformers")
pytest.importorskip("transformers")

from bertkit.sentence import bge_m3
from bertkit.tasks.sources import SPARSE_LINEAR, inspect_source
from sparse_dirs import mlm_dir, sparse_dirs


@pytest.fixture(scope="module")
def dirs(tmp_path_factory):
    return sparse_dirs(tmp_path_factory.mktemp("sparse"))


def test_sparse_encoder_directories_are_sparse_embeddings(dirs):
    for kind in ("splade", "inference-free", "csr"):
        info = inspect_source(dirs[kind])
        assert (info.sparse, info.task, info.layout) == (kind, "sparse-embeddings", "sentence-transformers")
        assert info.model == "bertkit.sentence.sparse:SparseEncoder"
        assert f"(sparse: {kind})" in info.describe()
    router = inspect_source(dirs["inference-free"])
    assert router.model_path.name == "document_0_MLMTransformer"  # the document side's model, not the Router's folder
    assert router.modules == ("document/MLMTransformer", "query/SparseStaticEmbedding", "document/SpladePooling")
    assert inspect_source(dirs["splade"]).modules == ("MLMTransformer", "SpladePooling")
    assert inspect_source(dirs["csr"]).modules == ("Transformer", "Pooling", "SparseAutoEncoder")


def test_bge_m3_is_a_dense_model_with_lexical_weights(dirs, tmp_path):
    info = inspect_source(dirs["bge-m3"])
    assert (info.sparse, info.task) == ("bge-m3", "embeddings")
    assert bge_m3.SPARSE_LINEAR == SPARSE_LINEAR  # one name of the file
    plain = inspect_source(mlm_dir(tmp_path))
    assert (plain.sparse, plain.task) == (None, "fill-mask")


def test_a_damaged_router_config_is_named(dirs, tmp_path):
    import shutil

    bad = tmp_path / "router"
    shutil.copytree(dirs["inference-free"], bad)
    (bad / "router_config.json").write_text('{"types": {}, "structure": {"query": ["query_0_x"]}}')
    with pytest.raises(ValueError, match=r"router_config\.json should map each route"):
        inspect_source(bad)
