"""``bertkit embed``, ``bertkit finetune classify`` and ``bertkit serve`` on RoBERTa, XLM-RoBERTa, MPNet, ModernBERT,
DeBERTa-v2, GTE, NomicBERT, Jina v3 and EuroBERT checkpoints as HF transformers writes them (tests/family_dirs.py:
random weights, the family's own tokenizer kind), each checked against HF itself: the embeddings against HF's model
and tokenizer, the fine-tuned directory read back by HF's ``AutoModelForSequenceClassification`` /
``AutoTokenizer``, the served routes through huggingface_hub's ``InferenceClient``.
"""

from __future__ import annotations

import csv
import lzma
import pathlib

import numpy as np
import pytest
import torch

transformers = pytest.importorskip("transformers")
pytest.importorskip("fastapi")
huggingface_hub = pytest.importorskip("huggingface_hub")

import bertkit  # noqa: E402
from bertkit.cli import main as cli  # noqa: E402
from bertkit.serving import create_app  # noqa: E402
from family_dirs import FAMILIES, NEW_FAMILIES, family_dir  # noqa: E402
from serve_helpers import serving  # noqa: E402

transformers.logging.set_verbosity_error()
FAMILIES = (*FAMILIES, *NEW_FAMILIES)
DATA = pathlib.Path(__file__).resolve().parents[1] / "data" / "finetune" / "vader_amazon"
TEXTS = ["Emma Woodhouse, handsome, clever, and rich.", "naïve café — Ærøskøbing, ça va ? 😀", "", "x " * 200,
         "Anne Elliot waited."]


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    return tmp_path_factory.mktemp("families")


def hf_model(directory: pathlib.Path, auto: str = "AutoModel"):
    return getattr(transformers, auto).from_pretrained(directory).eval()


def hf_mean_pooled(directory: pathlib.Path, texts: list[str], max_length: int) -> np.ndarray:
    """Mean pooling of HF's last hidden states over the real tokens: what ``bertkit embed`` gives a plain model."""
    tokenizer = transformers.AutoTokenizer.from_pretrained(directory)
    enc = tokenizer(texts, padding=True, truncation=True, max_length=max_length, return_tensors="pt")
    with torch.no_grad():
        hidden = hf_model(directory)(input_ids=enc["input_ids"], attention_mask=enc["attention_mask"])[0]
    mask = enc["attention_mask"][..., None].float()
    return ((hidden * mask).sum(1) / mask.sum(1)).numpy()


@pytest.mark.parametrize("family", FAMILIES)
def test_embed_cli_equals_hf(root, tmp_path, family):
    directory = family_dir(root, family, "AutoModel")
    source = tmp_path / "texts.txt"
    source.write_text("\n".join(TEXTS) + "\n", encoding="utf-8")
    out = tmp_path / "vectors.npy"
    assert cli(["embed", str(directory), "--input", str(source), "-o", str(out)]) == 0
    got = np.load(out)
    limit = bertkit.BERT.from_pretrained(directory).config.max_tokens
    assert got.shape == (len(TEXTS), 36)
    np.testing.assert_allclose(got, hf_mean_pooled(directory, TEXTS, limit), atol=2e-5, rtol=1e-4)


def _sentiment(tmp_path: pathlib.Path, split: str, rows: int) -> pathlib.Path:
    with lzma.open(DATA / f"{split}.tsv.xz", "rt", encoding="utf-8") as f:
        lines = f.read().splitlines()[: rows + 1]
    path = tmp_path / f"{split}.tsv"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def finetuned(root, tmp_path_factory):
    """``bertkit finetune classify`` run on each family's masked-LM checkpoint (one short epoch)."""
    data = tmp_path_factory.mktemp("sentiment")
    train, dev = _sentiment(data, "train", 64), _sentiment(data, "dev", 24)
    runs = {}
    for family in FAMILIES:
        out = root / f"run-{family}"
        code = cli(["finetune", "classify", "--model", str(family_dir(root, family)), "--train", str(train),
                    "--validation", str(dev), "--text-column", "sentence", "-o", str(out), "--epochs", "1",
                    "--batch-size", "16", "--max-seq-length", "48", "--learning-rate", "1e-3"])
        assert code == 0, family
        runs[family] = out
    return runs, dev


@pytest.mark.parametrize("family", FAMILIES)
def test_finetune_classify_writes_what_hf_reads(finetuned, family):
    runs, dev = finetuned
    model_dir = runs[family] / "model"
    config = transformers.AutoConfig.from_pretrained(model_dir)
    assert config.model_type == family and config.architectures[0].endswith("ForSequenceClassification")
    with open(dev, encoding="utf-8", newline="") as f:
        texts = [row["sentence"] for row in csv.DictReader(f, delimiter="\t")][:8]
    theirs_tok = transformers.AutoTokenizer.from_pretrained(model_dir)
    ours_tok = bertkit.AutoTokenizer.from_pretrained(model_dir)
    theirs_enc = theirs_tok(texts, padding=True, truncation=True, max_length=48, return_tensors="pt")
    ours_enc = ours_tok(texts, padding=True, truncation=True, max_length=48, return_tensors="pt")
    assert ours_enc["input_ids"].tolist() == theirs_enc["input_ids"].tolist()
    with torch.no_grad():
        theirs = hf_model(model_dir, "AutoModelForSequenceClassification")(
            input_ids=theirs_enc["input_ids"], attention_mask=theirs_enc["attention_mask"]).logits
        ours = bertkit.BERTForSequenceClassification.from_pretrained(model_dir)(
            ours_enc["input_ids"], ours_enc["attention_mask"])
    torch.testing.assert_close(ours, theirs, atol=2e-5, rtol=1e-4)
    results = (runs[family] / "results.json").read_text()
    assert '"accuracy"' in results


@pytest.mark.parametrize("family", FAMILIES)
def test_serve_classifier_and_embeddings_through_inference_client(finetuned, root, family):
    runs, _ = finetuned
    model_dir = runs[family] / "model"
    want = bertkit.pipeline("text-classification", model=model_dir, top_k=None)("not bad at all")
    with serving(create_app(model_dir)) as (url, _):
        got = huggingface_hub.InferenceClient(model=url).text_classification("not bad at all")
    assert [(g.label, round(g.score, 5)) for g in got] == [(w["label"], round(w["score"], 5)) for w in want]
    directory = family_dir(root, family, "AutoModel")
    with serving(create_app(directory, task="embeddings")) as (url, _):
        vectors = huggingface_hub.InferenceClient(model=url).feature_extraction(TEXTS[:2])
    limit = bertkit.BERT.from_pretrained(directory).config.max_tokens
    want = hf_mean_pooled(directory, TEXTS[:2], limit)
    want /= np.linalg.norm(want, axis=1, keepdims=True)  # TEI's /embed normalises by default
    np.testing.assert_allclose(np.asarray(vectors), want, atol=2e-5, rtol=1e-4)


def test_serve_reranks_with_an_xlm_roberta_cross_encoder(root):
    """A one-label XLM-R classifier (bge-reranker's layout) is served as TEI's /rerank, ranked as HF scores it."""
    import httpx

    directory = family_dir(root, "xlm-roberta", "AutoModelForSequenceClassification", num_labels=1, seed=3)
    query, texts = "who wrote Emma?", ["Jane Austen wrote Emma.", "Paris is in France.", "Anne Elliot waited."]
    tokenizer = transformers.AutoTokenizer.from_pretrained(directory)
    enc = tokenizer([query] * 3, texts, padding=True, return_tensors="pt")
    with torch.no_grad():
        scores = hf_model(directory, "AutoModelForSequenceClassification")(**enc).logits[:, 0]
    with serving(create_app(directory)) as (url, _):
        info = httpx.get(f"{url}/info").json()
        ranked = httpx.post(f"{url}/rerank", json={"query": query, "texts": texts, "raw_scores": True}).json()
    assert info["task"] == "rerank"
    assert [r["index"] for r in ranked] == scores.argsort(descending=True).tolist()
    np.testing.assert_allclose([r["score"] for r in sorted(ranked, key=lambda r: r["index"])], scores.numpy(),
                               atol=2e-5, rtol=1e-4)


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("head", ["AutoModel", "AutoModelForMaskedLM", "AutoModelForTokenClassification"])
def test_auto_model_loads_the_architecture_a_directory_holds(root, family, head):
    directory = family_dir(root, family, head)
    model = bertkit.AutoModel.from_pretrained(directory)
    expected = {"AutoModel": bertkit.BERT, "AutoModelForMaskedLM": bertkit.BERTForMaskedLM,
                "AutoModelForTokenClassification": bertkit.BERTForTokenClassification}[head]
    assert type(model) is expected and model.config.hf_model_type == family
    assert bertkit.AutoConfig.from_pretrained(directory) == model.config
    enc = transformers.AutoTokenizer.from_pretrained(directory)(TEXTS[:2], padding=True, return_tensors="pt")
    with torch.no_grad():
        theirs = hf_model(directory, head)(input_ids=enc["input_ids"], attention_mask=enc["attention_mask"])[0]
        ours = model(enc["input_ids"], enc["attention_mask"])
    ours = ours[0] if isinstance(ours, tuple) else ours
    real = enc["attention_mask"].bool()
    torch.testing.assert_close(ours[real], theirs[real], atol=2e-5, rtol=1e-4)
