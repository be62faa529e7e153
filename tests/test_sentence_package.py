"""One sentence-transformers package (issue 39): the model kinds side by side in bertkit.sentence, one table of
losses, the rerank pipeline over CrossEncoder (never the reverse), one name per public class, and the old
``bertkit.embedding`` import path."""

from __future__ import annotations

import ast
import subprocess
import sys
import warnings

import numpy as np
import pytest
import torch

import bertkit
from bertkit.pipelines import pipeline
from bertkit.sentence.cross_encoder import CrossEncoder
from bertkit.sentence.losses import BI_ENCODER, CROSS_ENCODER, LOSS_TABLE, build, loss_entry, loss_names
from test_embedding_mining import tiny_model
from test_layout import SRC

PAIRS = [("who wrote emma", "jane austen wrote emma"), ("the capital of france", "paris is the capital"),
         ("a city", "the house of the father in the rain " * 9), ("rain " * 40, "a garden")]


@pytest.fixture(scope="module")
def classifier_dir(tmp_path_factory):
    words = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *sorted({w for pair in PAIRS for t in pair
                                                                       for w in t.split()})]
    directory = tiny_model(tmp_path_factory.mktemp("ce") / "tiny", words, max_positions=32)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the new head: random, which is all a comparison of two paths needs
        model = bertkit.BERTForSequenceClassification.from_pretrained(directory, num_labels=1)
    torch.manual_seed(0)
    torch.nn.init.normal_(model.classifier.weight, std=1.0)
    model.save_pretrained(directory)
    return directory


def test_no_two_public_classes_share_a_name():
    """compat is left out: its classes are other libraries' APIs by their own names (d2l's BERTEncoder)."""
    homes: dict[str, list[str]] = {}
    for path in sorted(SRC.rglob("*.py")):
        parts = path.relative_to(SRC).parts
        if parts[0] == "compat" or any(p.startswith("_") and p != "__init__.py" for p in parts):
            continue
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            if isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
                homes.setdefault(node.name, []).append("/".join(parts))
    assert not {name: where for name, where in homes.items() if len(where) > 1}


def test_the_rerankers_mnrl_keeps_its_old_name():
    from bertkit.embedding import rerank_losses
    from bertkit.sentence.losses import rerank
    from bertkit.sentence.losses.contrastive import MultipleNegativesRankingLoss

    assert rerank.MultipleNegativesRankingLoss is rerank.CrossEncoderMultipleNegativesRankingLoss
    assert rerank_losses.MultipleNegativesRankingLoss is rerank.CrossEncoderMultipleNegativesRankingLoss
    assert bertkit.embedding.MultipleNegativesRankingLoss is MultipleNegativesRankingLoss  # the bi-encoder's


def test_every_loss_is_one_row_of_the_table():
    from bertkit.cli.finetune_embed import LOSSES
    from bertkit.cli.finetune_rerank import RERANK_LOSSES
    from bertkit.sentence.rerank_training import build_rerank_loss
    from bertkit.sentence.training import build_loss

    assert loss_names(BI_ENCODER) == LOSSES and loss_names(CROSS_ENCODER) == RERANK_LOSSES  # what --loss takes
    for entry in LOSS_TABLE:
        options = {"guide": lambda inputs: inputs} if "guide" in entry.needs else {}
        assert type(build(entry.kind, entry.name, **options)) is entry.cls
    gist = build_loss("gist", guide=lambda inputs: inputs, scale=20.0)
    assert gist.temperature == pytest.approx(0.05)  # --scale is 1 / GIST's temperature
    mnrl = build_rerank_loss("mnrl", num_negatives=2)
    assert type(mnrl) is loss_entry(CROSS_ENCODER, "mnrl").cls and mnrl.num_negatives == 2
    with pytest.raises(ValueError, match="--symmetric does not apply to --loss cosent; it applies to mnrl, "
                                         "cached-mnrl"):
        build_loss("cosent", symmetric=True)
    with pytest.raises(ValueError, match="--num-negatives does not apply to --loss bce; it applies to mnrl"):
        build_rerank_loss("bce", num_negatives=2)
    with pytest.raises(ValueError, match="--loss gist needs --guide"):
        build_loss("gist")
    with pytest.raises(ValueError, match="'cosent' is not a loss bertkit trains rerankers with"):
        build_rerank_loss("cosent")


def test_the_old_import_path_still_works():
    import bertkit.embedding as old

    for name, module in old.MOVED.items():
        assert getattr(old, name) is getattr(sys.modules[module], name), name
    from bertkit.embedding.rerank_training import finetune_reranker
    from bertkit.embedding.training import finetune_embeddings

    from bertkit.sentence import rerank_training, training

    assert finetune_embeddings is training.finetune_embeddings
    assert finetune_reranker is rerank_training.finetune_reranker
    assert training.__spec__.name == "bertkit.sentence.training"  # the alias leaves the module's own name alone
    with pytest.raises(ModuleNotFoundError):
        import bertkit.embedding.nothing  # noqa: F401


def test_a_cross_encoder_imports_no_pipeline(classifier_dir):
    code = (f"import sys; from bertkit.sentence.cross_encoder import CrossEncoder; "
            f"CrossEncoder({str(classifier_dir)!r}, dtype='fp32').predict([('a', 'b')]); "
            f"assert not [m for m in sys.modules if m.startswith('bertkit.pipelines')], 'imported pipelines'")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_the_rerank_pipeline_scores_through_a_cross_encoder(classifier_dir):
    reranker = pipeline("rerank", classifier_dir, dtype="fp32", truncation="longest_first")
    assert isinstance(reranker.cross_encoder, CrossEncoder) and reranker.cross_encoder.model is reranker.model
    cross = CrossEncoder(classifier_dir, dtype="fp32", max_length=reranker.max_length)
    for query, passage in PAIRS:
        raw = reranker(query, [passage], raw_scores=True)[0]["score"]
        np.testing.assert_allclose(raw, cross.logits([(query, passage)])[0, 0], rtol=1e-6, atol=1e-6)


def test_a_length_set_on_the_rerank_pipeline_cuts_its_pairs(classifier_dir):
    """The server sets the pipeline's length (--max-input-length, a reranker's trained length): the cross-encoder
    under it cuts at that length, as the pipeline did before it scored through one."""
    reranker = pipeline("rerank", classifier_dir, dtype="fp32")
    query, passage = PAIRS[2]
    assert len(reranker.preprocess((query, passage), reranker.params)[0]["input_ids"]) == 32
    reranker.max_length = 12
    assert reranker.cross_encoder.max_length == 12
    assert len(reranker.preprocess((query, passage), reranker.params)[0]["input_ids"]) == 12
    cut = CrossEncoder.from_model(reranker.model, reranker.tokenizer, max_length=12).logits([(query, passage)])[0]
    np.testing.assert_allclose(reranker(query, [passage], raw_scores=True)[0]["score"], cut[0], rtol=1e-6)


def test_serving_imports_no_sentence_training_code():
    training = ("bertkit.sentence.training", "bertkit.sentence.rerank_training", "bertkit.sentence.losses",
                "bertkit.sentence.evaluation", "bertkit.sentence.data", "bertkit.sentence.mining",
                "bertkit.sentence.eval_schedule", "bertkit.embedding")
    found = []
    for path in sorted((SRC / "serving").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith(training):
                found.append(f"{path.name}: {node.module}")
    assert not found, found
