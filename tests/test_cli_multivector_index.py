"""``bertkit index build|compress|append`` and ``bertkit search`` over them, with a tiny ColBERT directory that
sentence-transformers writes: a build killed half-way and resumed equals a one-go build, exact search equals
brute-force MaxSim of bertkit.MultiVectorEncoder's vectors, appends equal a one-go build (exact) or compress the new
documents with the existing codec (PLAID), interrupted compresses and appends finish without a half index that
loads, and bad input gets one line naming the file or argument."""

import json
import sys

import numpy as np
import pytest
import torch

pytest.importorskip("sentence_transformers")

import bertkit
from bertkit.cli import main
from bertkit.retrieval import index_files
from bertkit.retrieval.multivector import MultiVectorIndex
from bertkit.retrieval.plaid import PlaidIndex, build_plaid_index
from bertkit.retrieval.plaid_codec import Codec
from conftest import kill_when
from test_cli_sparse_index import one_line_error
from test_multi_vector import WORDS, bert_dir

QUERIES = ["how many people live in berlin", "the cat sat", "old river town"]


def colbert16(base: str, out, seed: int = 1) -> str:
    """A ColBERT directory: the tiny BERT, a 36 -> 16 projection, the punctuation skiplist, normalised."""
    import sentence_transformers as st
    from sentence_transformers.base.modules import Normalize, Transformer
    from sentence_transformers.base.modules.dense import Dense
    from sentence_transformers.multi_vector_encoder.modules import MultiVectorMask

    torch.manual_seed(seed)
    modules = [Transformer(base, query_length=10), Dense(36, 16, bias=False, activation_function=torch.nn.Identity(),
                                                         module_input_name="token_embeddings",
                                                         module_output_name="token_embeddings"),
               MultiVectorMask(skiplist_words=[",", ".", "?", "!"]),
               Normalize(module_input_name="token_embeddings", module_output_name="token_embeddings")]
    st.MultiVectorEncoder(modules=modules, device="cpu").save(str(out))
    return str(out)


def write_corpus(path, records):
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    root = tmp_path_factory.mktemp("cli-colbert")
    model = colbert16(bert_dir(root / "bert"), root / "colbert")
    rng = np.random.default_rng(0)
    words = WORDS[33:-3]
    records = [{"_id": f"d{i}", "title": "berlin" if i % 7 == 0 else "",
                "text": " ".join(rng.choice(words, size=int(rng.integers(1, 16))))} for i in range(120)]
    return root, model, write_corpus(root / "corpus.jsonl", records), records


def build_args(model, corpus, out, *extra):
    return ["index", "build", str(model), "--corpus", str(corpus), "-o", str(out), "--dtype", "fp32", "--quiet",
            "--chunk-documents", "8", "--max-tokens", "150", "--store", "float32", *extra]


def append_args(index, model, corpus):
    return ["index", "append", str(index), "--model", str(model), "--corpus", str(corpus), "--dtype", "fp32",
            "--quiet", "--chunk-documents", "8", "--max-tokens", "150"]


def same_exact(a: MultiVectorIndex, b: MultiVectorIndex, documents: int, exact: bool = True):
    """Same documents, ids and vectors (bit for bit, or to float32 rounding where the batches differed)."""
    assert np.array_equal(a.offsets, b.offsets)
    if exact:
        assert np.array_equal(a.vectors, b.vectors)
    else:
        np.testing.assert_allclose(a.vectors, b.vectors, atol=1e-5)
    assert a.ids(range(documents)) == b.ids(range(documents)) == [f"d{i}" for i in range(documents)]


def test_build_killed_half_way_resumes_to_the_one_go_index(setup):
    root, model, corpus, records = setup
    out = root / "killed"
    kill_when([sys.executable, "-m", "bertkit.cli", *build_args(model, corpus, out)],
              out / "segments" / "000003.lengths.npy")
    assert (out / "segments" / "000003.lengths.npy").exists() and not (out / "manifest.json").exists()
    with pytest.raises(ValueError, match=r"holds no manifest\.json"):
        MultiVectorIndex.load(out)
    assert main(build_args(model, corpus, out, "--resume")) == 0
    assert main(build_args(model, corpus, root / "one-go")) == 0
    same_exact(MultiVectorIndex.load(out), MultiVectorIndex.load(root / "one-go"), len(records))


def brute_force(model, records, queries, k):
    encoder = bertkit.MultiVectorEncoder(model, dtype="fp32")
    docs = encoder.encode_document([(r["title"] + " " + r["text"]).strip() for r in records])
    scores = torch.stack([torch.stack([(q @ d.T).max(1).values.sum() for d in docs])
                          for q in encoder.encode_query(queries)])
    return [(sorted(range(len(records)), key=lambda p: (-row[p].item(), p))[:k], row) for row in scores]


def searched(capsys, index, model, *extra):
    capsys.readouterr()
    assert main(["search", str(index), "--model", str(model), "--query", *QUERIES, "-k", "4", "--jsonl",
                 "--dtype", "fp32", *extra]) == 0
    out, err = capsys.readouterr()
    assert "search per query mean" in err and "encode" in err
    searched.err = err
    return [json.loads(line) for line in out.splitlines()]


def test_exact_and_compressed_search_return_maxsim_ids_and_scores(setup, capsys):
    root, model, corpus, records = setup
    assert main(build_args(model, corpus, root / "exact")) == 0
    expected = brute_force(model, records, QUERIES, 4)
    for line, (best, row) in zip(searched(capsys, root / "exact", model), expected):
        assert [hit["id"] for hit in line["hits"]] == [records[p]["_id"] for p in best]
        torch.testing.assert_close(torch.tensor([hit["score"] for hit in line["hits"]]), row[best])
    assert main(["index", "compress", str(root / "exact"), "-o", str(root / "plaid"), "--centroids", "16",
                 "--nbits", "4"]) == 0
    # nothing pruned and the short list scored on the exact index: exact MaxSim
    exact_lines = searched(capsys, root / "plaid", model, "--nprobe", "16", "--candidates", "120",
                           "--rerank", str(root / "exact"))
    for line, (best, _) in zip(exact_lines, expected):
        assert [hit["id"] for hit in line["hits"]] == [records[p]["_id"] for p in best]
    assert "scored exactly on" not in searched.err  # --rerank given: nothing to say
    # by default the short list is scored on the exact index it was compressed from, while that is there
    default = searched(capsys, root / "plaid", model, "--nprobe", "16", "--candidates", "120")
    assert f"scored exactly on {(root / 'exact').resolve()}" in searched.err and default == [
        {**line, "search_ms": d["search_ms"]} for line, d in zip(exact_lines, default)]
    decompressed = searched(capsys, root / "plaid", model, "--decompressed")
    assert "scored on the decompressed vectors" in searched.err
    assert all(len(line["hits"]) == 4 for line in decompressed)
    one_line_error(capsys, ["search", str(root / "exact"), "--model", model, "--query", "x", "--nprobe", "2"],
                   "--nprobe, --candidates, --rerank and --decompressed apply to a compressed (PLAID) index")


def test_append_equals_a_one_go_build_and_plaid_appends_with_its_codec(setup, tmp_path):
    _, model, corpus, records = setup
    first, second = write_corpus(tmp_path / "a.jsonl", records[:70]), write_corpus(tmp_path / "b.jsonl", records[70:])
    assert main(build_args(model, first, tmp_path / "exact")) == 0
    assert main(["index", "compress", str(tmp_path / "exact"), "-o", str(tmp_path / "plaid"), "--centroids",
                 "16"]) == 0
    before = PlaidIndex.load(tmp_path / "plaid")
    old_codes, old_residuals = np.array(before.codes), np.array(before.residuals)
    assert main(append_args(tmp_path / "exact", model, second)) == 0
    assert main(build_args(model, corpus, tmp_path / "one-go")) == 0
    appended = MultiVectorIndex.load(tmp_path / "exact")
    same_exact(appended, MultiVectorIndex.load(tmp_path / "one-go"), len(records), exact=False)
    assert not (tmp_path / "exact" / "append").exists()
    assert main(append_args(tmp_path / "plaid", model, second)) == 0
    after = PlaidIndex.load(tmp_path / "plaid")
    assert after.documents == len(records) and after.ids(range(len(records))) == [f"d{i}" for i in range(120)]
    torch.testing.assert_close(after.codec.centroids, before.codec.centroids)
    full = appended  # the same documents encoded in the same chunks as the PLAID append encoded them
    new_codes, new_packed = after.codec.compress(torch.from_numpy(np.array(full.vectors[old_codes.shape[0]:])))
    assert np.array_equal(after.codes, np.concatenate([old_codes, new_codes.numpy()]))
    assert np.array_equal(after.residuals, np.concatenate([old_residuals, new_packed.numpy()]))
    # the ivf was remade over every document: nothing pruned, reranked exactly, it is exact MaxSim
    queries = [full.document(p).astype(np.float32)[:3] for p in (5, 90, 119)]
    exact = full.search(queries, 5)
    for (_, p1), (_, p2) in zip(after.search(queries, 5, nprobe=16, candidates=120, rerank=full), exact):
        assert np.array_equal(p1, p2)


def test_interrupted_compress_and_append_finish_and_never_load_half(setup, tmp_path, monkeypatch, capsys):
    _, model, corpus, records = setup
    assert main(build_args(model, corpus, tmp_path / "exact")) == 0
    exact = MultiVectorIndex.load(tmp_path / "exact")
    build_plaid_index(exact, tmp_path / "one-go", centroids=16, max_tokens=100)
    calls, compress = [], Codec.compress

    def killed_on_the_third_slice(self, vectors):
        calls.append(1)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return compress(self, vectors)

    monkeypatch.setattr(Codec, "compress", killed_on_the_third_slice)
    with pytest.raises(KeyboardInterrupt):
        build_plaid_index(exact, tmp_path / "resumed", centroids=16, max_tokens=100)
    monkeypatch.setattr(Codec, "compress", compress)
    with pytest.raises(ValueError, match=r"holds no manifest\.json"):
        PlaidIndex.load(tmp_path / "resumed")
    progress = json.loads((tmp_path / "resumed" / ".building").read_text())
    assert progress["documents"] > 0
    resumed = build_plaid_index(exact, tmp_path / "resumed", centroids=16, max_tokens=100)
    for name in ("codes.npy", "residuals.npy", "centroids.npy", "buckets.npy", "ivf/docs.npy"):
        assert (tmp_path / "resumed" / name).read_bytes() == (tmp_path / "one-go" / name).read_bytes(), name
    assert resumed.documents == len(records)
    # an append killed while its files are swapped in: no manifest, nothing loads; run again, it finishes once
    second = write_corpus(tmp_path / "more.jsonl", [{"_id": "new1", "text": "berlin river"},
                                                   {"_id": "new2", "text": "the old cat"}])
    renames, replace = [], index_files.os.replace

    def killed_on_the_second_swap(a, b):  # os.replace is the os module's: count only the swap's renames
        renames.append(str(a).endswith(".next"))
        if sum(renames) == 2:
            raise KeyboardInterrupt
        return replace(a, b)

    monkeypatch.setattr(index_files.os, "replace", killed_on_the_second_swap)
    assert main(append_args(tmp_path / "resumed", model, second)) == 130  # "bertkit: interrupted"
    monkeypatch.setattr(index_files.os, "replace", replace)
    with pytest.raises(ValueError, match="an append to this PLAID index was interrupted"):
        PlaidIndex.load(tmp_path / "resumed")
    assert main(append_args(tmp_path / "resumed", model, second)) == 0
    assert "an interrupted append was finished" in capsys.readouterr().err
    index = PlaidIndex.load(tmp_path / "resumed")
    assert index.documents == len(records) + 2 and index.ids([120, 121]) == ["new1", "new2"]


def test_bad_input_one_line_errors(setup, capsys, tmp_path):
    root, model, corpus, _ = setup
    index = tmp_path / "bad"
    assert main(build_args(model, corpus, index)) == 0
    long = " ".join(["berlin"] * 12)  # past the query length of 10
    one_line_error(capsys, ["search", str(index), "--model", model, "--query", long], "sentences[0]",
                   "longer than the model's query length", "--truncate")
    assert main(["search", str(index), "--model", model, "--query", long, "--truncate", "--jsonl"]) == 0
    assert "were cut" in capsys.readouterr().err  # the CLI shows warnings on stderr
    other = colbert16(str(root / "bert"), tmp_path / "other", seed=2)
    one_line_error(capsys, ["search", str(index), "--model", other, "--query", "x"], "was built by", "colbert sha256:",
                   "other sha256:")
    one_line_error(capsys, append_args(index, other, corpus), "was built by", "other sha256:")
    empty = write_corpus(tmp_path / "empty.jsonl", [])
    one_line_error(capsys, build_args(model, empty, tmp_path / "i1"), "--corpus", "empty.jsonl", "no documents")
    one_line_error(capsys, build_args(model, corpus, index), "is not empty")
    vectors = index / "vectors.npy"
    vectors.write_bytes(vectors.read_bytes()[:-5])
    one_line_error(capsys, ["search", str(index), "--model", model, "--query", "x"], str(vectors), "truncated")
    one_line_error(capsys, ["search", str(tmp_path / "i1"), "--model", model, "--query", "x"], "manifest.json")
    one_line_error(capsys, ["index", "compress", str(corpus), "-o", str(tmp_path / "p")], "manifest.json")
