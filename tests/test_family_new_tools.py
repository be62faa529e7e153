"""The tools beyond the family matrix on the newer encoders (DeBERTa-v2, GTE, NomicBERT, Jina v3, EuroBERT), each
checked against HF transformers or sentence-transformers on directories they write (tests/family_dirs.py):

* ``bertkit pretrain --family NAME``: a small model of the family from scratch on Austen, read by HF's masked-LM
  class of the family with equal logits;
* ``bertkit finetune embed`` on a sentence-transformers directory of GTE (CLS pooling), Nomic (mean pooling, its
  ``search_query: `` / ``search_document: `` prompts) and Jina v3 (mean pooling): the trained directory keeps its
  pooling and prompts and encodes as sentence-transformers does, ``bertkit embed`` too;
* ``bertkit finetune rerank`` on the same checkpoints: a one-label cross-encoder HF reads back, scored as
  sentence-transformers' ``CrossEncoder`` and served on ``/rerank``;
* ``bertkit info`` on each family's directories: the family, and parameter counts equal to HF's.
"""

from __future__ import annotations

import json
import pathlib
import random

import numpy as np
import pytest
import torch

transformers = pytest.importorskip("transformers")

import bertkit  # noqa: E402
from bertkit.cli import main as cli  # noqa: E402
from bertkit.config import bert_architecture_name  # noqa: E402
from bertkit.modeling.counting import count_parameters  # noqa: E402
from bertkit.resources import austen_novels  # noqa: E402
from family_dirs import EMBEDDERS, NEW_FAMILIES, austen_lines, family_dir, has_head  # noqa: E402

transformers.logging.set_verbosity_error()
#: a config JSON of the size only: --family builds that family's model of it
TINY = dict(num_hidden_layers=1, hidden_size=32, num_attention_heads=2, intermediate_size=37)
TEXTS = ["Emma Woodhouse, handsome, clever, and rich.", "naïve café — Ærøskøbing, ça va ? 😀", "Anne Elliot waited."]
#: what each embedder's released sentence-transformers directory pools with, and its prompts
POOLING = {"gte": "cls", "nomic_bert": "mean", "jina_embeddings_v3": "mean"}
PROMPTS = {"nomic_bert": {"query": "search_query: ", "document": "search_document: "}}
RUN = ["--batch-size", "8", "--max-steps", "2", "--learning-rate", "1e-3", "--precision", "fp32", "--device", "cpu"]
HEADS = ("AutoModel", "AutoModelForMaskedLM", "AutoModelForSequenceClassification", "AutoModelForTokenClassification",
         "AutoModelForQuestionAnswering", "AutoModelForMultipleChoice")


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    return tmp_path_factory.mktemp("new-tools")


@pytest.fixture(scope="module")
def pairs(root) -> pathlib.Path:
    """(anchor, positive, negative) rows of Austen's lines: a positive shares the anchor's first words."""
    rng = random.Random(0)
    lines = [line for line in austen_lines() if len(line.split()) > 6][:64]
    path = root / "pairs.jsonl"
    with open(path, "w", encoding="utf-8") as f:
        for line in lines[:32]:
            words = line.split()
            f.write(json.dumps({"anchor": " ".join(words[:4]), "positive": line,
                                "negative": rng.choice(lines[32:])}) + "\n")
    return path


# ---------------------------------------------------------------------------- pretraining
@pytest.mark.parametrize("family", ("modernbert", *NEW_FAMILIES))
def test_pretrain_from_scratch_with_family_reads_the_same_in_hf(root, tmp_path, family):
    book, config = tmp_path / "book.txt", tmp_path / "tiny.json"
    book.write_text(austen_novels()["persuasion"][:40_000], encoding="utf-8")
    config.write_text(json.dumps(TINY), encoding="utf-8")
    out = tmp_path / "run"
    assert cli([str(a) for a in ("pretrain", "--text", book, "--model", config, "-o", out, "--family", family,
                                 "--vocab-size", 400, "--max-seq-length", 32, "--batch-size", 8, "--max-steps", 3,
                                 "--precision", "fp32")]) == 0
    model_dir = out / "model"
    saved = json.loads((model_dir / "config.json").read_text())
    assert saved["model_type"] == family and saved["hidden_size"] == TINY["hidden_size"]
    assert json.loads((out / "run.json").read_text())["task"] == {"name": "pretraining", "family": family}
    hf, info = transformers.AutoModelForMaskedLM.from_pretrained(model_dir, output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"], info
    ours = bertkit.AutoModel.from_pretrained(model_dir)
    assert ours.config.hf_model_type == family
    batch = bertkit.AutoTokenizer.from_pretrained(model_dir)(TEXTS, padding=True, return_tensors="pt")
    real = batch["attention_mask"].bool()
    with torch.no_grad():
        want = hf.eval()(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
        got = ours.eval()(batch["input_ids"], batch["attention_mask"])
    got = got[0] if isinstance(got, tuple) else got
    torch.testing.assert_close(got[real], want[real], atol=2e-5, rtol=2e-5)


def test_pretrain_family_refusals(tmp_path, capsys):
    book = tmp_path / "book.txt"
    book.write_text(austen_novels()["persuasion"][:20_000], encoding="utf-8")
    for extra, message in ((["--family", "nope"], "(--family) is not a family bertkit pretrains; choose one of"),
                           (["--family", "modernbert", "--nsp"], "(--nsp) does not combine with family='modernbert'"),
                           (["--family", "modernbert", "--objective", "electra"], "are alternatives")):
        with pytest.raises(SystemExit) as exit_:
            cli(["pretrain", "--text", str(book), "-o", str(tmp_path / "out"), *extra])
        assert exit_.value.code == 2
        err = capsys.readouterr().err
        assert message in err, err
    assert not (tmp_path / "out").exists()


# ---------------------------------------------------------------------------- embedding and reranker training
def st_directory(root: pathlib.Path, family: str) -> pathlib.Path:
    """A sentence-transformers directory over the family's tiny checkpoint, as the released embedder's: its pooling
    and prompts, normalised."""
    st = pytest.importorskip("sentence_transformers")
    from sentence_transformers.sentence_transformer import modules

    directory = root / f"st-{family}"
    if not directory.exists():
        transformer = modules.Transformer(str(family_dir(root, family, "AutoModel")), max_seq_length=32)
        pooling = modules.Pooling(transformer.get_embedding_dimension(), POOLING[family])
        st.SentenceTransformer(modules=[transformer, pooling, modules.Normalize()], device="cpu",
                               prompts=PROMPTS.get(family)).save(str(directory))
    return directory


@pytest.mark.parametrize("family", EMBEDDERS)
def test_finetune_embed_keeps_pooling_and_prompts_and_encodes_as_sentence_transformers(root, tmp_path, pairs,
                                                                                       family):
    st = pytest.importorskip("sentence_transformers")
    source = st_directory(root, family)
    np.testing.assert_allclose(bertkit.SentenceTransformer(source).encode(TEXTS),
                               st.SentenceTransformer(str(source), device="cpu").encode(TEXTS), atol=1e-5)
    prompts = PROMPTS.get(family, {})
    flags = [*(["--query-prompt", prompts["query"], "--document-prompt", prompts["document"]] if prompts else [])]
    out = tmp_path / "embed"
    assert cli(["finetune", "embed", "--model", str(source), "--train", str(pairs), "-o", str(out), *RUN,
                *flags]) == 0
    trained = out / "model"
    theirs = st.SentenceTransformer(str(trained), device="cpu")
    assert theirs[1].pooling_mode == POOLING[family]
    assert {k: v for k, v in theirs.prompts.items() if v} == prompts
    ours = bertkit.SentenceTransformer(trained)
    before = bertkit.SentenceTransformer(source).encode(TEXTS)
    assert not np.allclose(ours.encode(TEXTS), before, atol=1e-4)  # it trained
    np.testing.assert_allclose(ours.encode(TEXTS), theirs.encode(TEXTS), atol=1e-5)
    if prompts:
        np.testing.assert_allclose(ours.encode(TEXTS, prompt_name="query"),
                                   theirs.encode(TEXTS, prompt_name="query"), atol=1e-5)
    texts = tmp_path / "texts.txt"
    texts.write_text("\n".join(TEXTS) + "\n", encoding="utf-8")
    assert cli(["embed", str(trained), "--input", str(texts), "-o", str(tmp_path / "v.npy")]) == 0
    np.testing.assert_allclose(np.load(tmp_path / "v.npy"), theirs.encode(TEXTS), atol=1e-5)


@pytest.mark.parametrize("family", EMBEDDERS)
def test_finetune_rerank_writes_a_cross_encoder_hf_and_sentence_transformers_read(root, tmp_path, pairs, family):
    st = pytest.importorskip("sentence_transformers")
    pytest.importorskip("fastapi")
    from fastapi.testclient import TestClient

    from bertkit.serving import create_app

    out = tmp_path / "rerank"
    assert cli(["finetune", "rerank", "--model", str(family_dir(root, family, "AutoModel")), "--train", str(pairs),
                "-o", str(out), "--loss", "bce", *RUN]) == 0
    trained = out / "model"
    assert transformers.AutoConfig.from_pretrained(trained).model_type == family
    query, texts = "who wrote Emma?", ["Jane Austen wrote Emma.", "Bath is in England.", "Anne Elliot waited."]
    want = st.CrossEncoder(str(trained), device="cpu").predict([(query, t) for t in texts])
    np.testing.assert_allclose(bertkit.CrossEncoder(trained).predict([(query, t) for t in texts]), want, atol=2e-5)
    tokenizer = transformers.AutoTokenizer.from_pretrained(trained)
    encoded = tokenizer([query] * 3, texts, padding=True, return_tensors="pt")
    with torch.no_grad():
        logits = transformers.AutoModelForSequenceClassification.from_pretrained(trained).eval()(**encoded).logits
    with TestClient(create_app(trained)) as client:
        ranked = client.post("/rerank", json={"query": query, "texts": texts, "raw_scores": True}).json()
    np.testing.assert_allclose([r["score"] for r in sorted(ranked, key=lambda r: r["index"])], logits[:, 0].numpy(),
                               atol=2e-5, rtol=1e-4)


# ---------------------------------------------------------------------------- bertkit info
@pytest.mark.parametrize("family", NEW_FAMILIES)
def test_info_names_the_family_and_counts_hfs_parameters(root, family, capsys):
    for head in HEADS:
        if not has_head(family, head):
            continue
        directory = family_dir(root, family, head)
        hf = getattr(transformers, head).from_pretrained(directory)
        architecture = hf.config.architectures[0]
        config = bertkit.AutoConfig.from_pretrained(directory)
        assert count_parameters(config, bert_architecture_name(architecture)) == \
            sum(p.numel() for p in hf.parameters()), head
        assert cli(["info", str(directory)]) == 0
        out = capsys.readouterr().out
        assert f"({family})" in out or f"family={family}" in out, out
        assert "L=2 H=36 A=3" in out
        assert head == "AutoModel" or f"with its head ({architecture})" in out, out
