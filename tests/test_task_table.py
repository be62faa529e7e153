"""The task table (bertkit.tasks.table) and inspect_source: every consumer reads the one table, and one function
says what a source holds for each layout bertkit reads."""

from __future__ import annotations

import json

import pytest
import torch

import bertkit
from bertkit.config import bert_architecture_name
from bertkit.tasks.sources import inspect_source
from bertkit.tasks.table import TABLE, find_task, resolve, served_tasks, task_for_architecture, task_names
from conftest import model_of

WORDS = ["the", "cat", "sat", "on", "mat", "paris", "is", "in", "france", "a", "dog"]


def save(directory, model, **json_files):
    """``model`` saved as an HF directory with a small tokenizer, and any extra JSON files (name -> content)."""
    model.save_pretrained(directory)
    (directory / "vocab.txt").write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *WORDS]) + "\n")
    bertkit.BERTTokenizerFast(vocab_file=directory / "vocab.txt").save_pretrained(directory)
    for name, content in json_files.items():
        (directory / name).write_text(json.dumps(content))
    return directory


# ------------------------------------------------------------------------------------------------ the table
def test_every_name_and_alias_is_unique_and_every_class_resolves():
    names = [name for row in TABLE for name in row.names]
    assert len(names) == len(set(names)), sorted(n for n in names if names.count(n) > 1)
    for row in TABLE:
        assert isinstance(resolve(row.model), type), row.name
        for name in row.names:
            assert find_task(name) is row
    with pytest.raises(ValueError, match="unknown task 'summarize'; choose one of embeddings"):
        find_task("summarize")
    with pytest.raises(ValueError, match=r"task choice \(multiple-choice\) has no pipeline; choose one of embeddings"):
        find_task("choice", "pipeline")


def test_every_pipeline_task_resolves_through_the_table():
    from bertkit.inference.precision import TASK_ROW
    from bertkit.pipelines import ALIASES, TASKS, pipeline_class

    rows = [row for row in TABLE if row.pipeline is not None]
    assert list(TASKS) == [row.name for row in rows]
    for row in rows:
        assert pipeline_class(row.name) is resolve(row.pipeline) and resolve(row.pipeline).task == row.name
        for alias in row.aliases:
            assert ALIASES[alias] == row.name and pipeline_class(alias) is resolve(row.pipeline)
    assert set(TASK_ROW) == set(TASKS)  # every pipeline task has a row in the dtype quality table


def test_every_export_task_resolves_through_the_table():
    from bertkit.export.models import model_class, signature_of
    from bertkit.export.models import task_names as export_names

    assert export_names() == task_names("export")
    for name in ("backbone", "sequence-classification", "token-classification", "question-answering", "masked-lm",
                 "causal-lm", "pretraining", "next-sentence-prediction", "multiple-choice", "sentence-embedding",
                 "classify", "tag", "qa", "choice"):  # the names bertkit export took before the table
        assert name in export_names()
        cls = model_class(name)
        assert cls is resolve(find_task(name).model)
        if cls is not bertkit.SentenceTransformer:
            model = model_of(cls, num_labels=2, is_decoder=cls is bertkit.BERTForCausalLM)
            assert signature_of(model) == find_task(name).export
    assert model_class("RobertaForTokenClassification") is bertkit.BERTForTokenClassification


def test_every_served_task_and_fine_tuning_task_is_a_row():
    from bertkit.serving.settings import PIPELINE_TASKS, TASKS
    from bertkit.tasks.finetuning import TASKS as FINETUNE_TASKS

    assert TASKS == ("auto", "embeddings", "classify", "ner", "qa", "fill-mask", "rerank", "colbert")
    assert {name: row.name for name, row in served_tasks().items()} == PIPELINE_TASKS
    assert all(row.pipeline is not None and row.routes for row in served_tasks().values())
    from bertkit.cli.finetune import TASK_FLAGS

    assert list(FINETUNE_TASKS) == ["classify", "tag", "qa", "choice"] and set(TASK_FLAGS) == set(FINETUNE_TASKS)
    for name, cls in FINETUNE_TASKS.items():
        row = find_task(name)
        assert row.finetune == cls.name == name and resolve(row.trainer) is cls
        assert cls.model_class is resolve(row.model)


def test_the_hf_architecture_names_map_back():
    from bertkit.modeling.factories import TASKS as FACTORY_TASKS
    from bertkit.weights.convert import ARCHITECTURES

    for name in ARCHITECTURES:  # every architecture bertkit loads answers one task
        row = task_for_architecture(name, 2)
        assert row is not None, name
        assert name in row.architectures
    for row in TABLE:
        assert set(row.architectures) <= set(ARCHITECTURES), row.name
        cls = resolve(row.model)
        assert cls in (bertkit.SentenceTransformer, bertkit.MultiVectorEncoder) or cls in ARCHITECTURES.values(), \
            row.name
    factory_classes = {cls for cls, _ in FACTORY_TASKS.values()} | {bertkit.BERT}
    assert {resolve(row.model) for row in TABLE if row.finetune in ("classify", "tag", "qa", "choice")} \
        <= factory_classes
    assert task_for_architecture("BertForSequenceClassification", 1).name == "rerank"
    assert task_for_architecture("BertForSequenceClassification", 3).name == "text-classification"
    assert task_for_architecture(bert_architecture_name("XLMRobertaForMaskedLM")).name == "fill-mask"
    assert task_for_architecture("BertForPreTraining").name == "fill-mask"
    assert task_for_architecture("GPT2LMHeadModel") is None


# ------------------------------------------------------------------------------------------- inspect_source
def test_inspect_a_plain_masked_lm_a_classifier_and_a_reranker(tmp_path):
    mlm = inspect_source(save(tmp_path / "mlm", model_of(bertkit.BERTForMaskedLM)))
    assert (mlm.layout, mlm.family, mlm.architecture, mlm.task) == ("hf", "bert", "BertForMaskedLM", "fill-mask")
    assert mlm.model == "bertkit.modeling.lm_heads:BERTForMaskedLM" and not mlm.cross_encoder
    assert (mlm.labels, mlm.max_length, mlm.positions, mlm.dtype) == (None, None, 40, "fp32")

    labels = {0: "negative", 1: "neutral", 2: "positive"}
    classifier = model_of(bertkit.BERTForSequenceClassification, num_labels=3, id2label=labels)
    info = inspect_source(save(tmp_path / "classifier", classifier))
    assert (info.task, info.labels, info.cross_encoder) == ("text-classification", tuple(labels.values()), True)
    assert find_task(info.task).serve.name == "classify"
    reranker = inspect_source(save(tmp_path / "reranker", model_of(bertkit.BERTForSequenceClassification,
                                                                    num_labels=1)))
    assert (reranker.task, reranker.labels, reranker.cross_encoder) == ("rerank", ("LABEL_0",), True)


def test_inspect_a_token_classifier_a_question_answerer_and_a_finetune_directory(tmp_path):
    tagger = model_of(bertkit.BERTForTokenClassification, num_labels=3, id2label={0: "O", 1: "B-LOC", 2: "I-LOC"})
    info = inspect_source(save(tmp_path / "tagger", tagger))
    assert (info.task, info.labels, info.layout) == ("token-classification", ("O", "B-LOC", "I-LOC"), "hf")
    qa = inspect_source(save(tmp_path / "qa", model_of(bertkit.BERTForQuestionAnswering)))
    assert (qa.task, qa.architecture, qa.labels) == ("question-answering", "BertForQuestionAnswering", None)

    record = {"task": "tag", "options": {"label_column": "tags"}, "max_seq_length": 32}
    finetuned = inspect_source(save(tmp_path / "finetuned", tagger, **{"task.json": record}))
    assert (finetuned.layout, finetuned.task, finetuned.max_length) == ("finetune", "token-classification", 32)
    assert finetuned.record == record
    choice = inspect_source(save(tmp_path / "choice", model_of(bertkit.BERTForMultipleChoice),
                                 **{"task.json": {"task": "choice"}}))
    assert (choice.task, choice.model) == ("multiple-choice", "bertkit.modeling.heads:BERTForMultipleChoice")
    (tmp_path / "choice" / "task.json").write_text(json.dumps({"task": "summarize"}))
    with pytest.raises(ValueError, match=r"task\.json: unknown task 'summarize'; choose one of text-classification"):
        inspect_source(tmp_path / "choice")


def test_inspect_a_sentence_transformers_directory_and_a_cross_encoder_directory(tmp_path):
    transformer = {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"}
    pooling = {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"}
    bi = save(tmp_path / "bi", model_of(bertkit.BERT), **{"modules.json": [pooling, transformer],
                                                         "sentence_bert_config.json": {"max_seq_length": 24}})
    info = inspect_source(bi)
    assert (info.layout, info.task, info.modules, info.max_length) == ("sentence-transformers", "embeddings",
                                                                       ("Transformer", "Pooling"), 24)
    assert info.sentence_transformers and not info.cross_encoder and info.architecture == "BertModel"
    assert info.model == "bertkit.sentence:SentenceTransformer" and info.model_path == bi

    cross = save(tmp_path / "cross", model_of(bertkit.BERTForSequenceClassification, num_labels=1),
                 **{"modules.json": [transformer], "sentence_bert_config.json": {"max_seq_length": 20}})
    info = inspect_source(cross)
    assert (info.layout, info.task, info.cross_encoder, info.max_length) == ("sentence-transformers", "rerank",
                                                                             True, 20)
    from bertkit.sentence.cross_encoder import is_cross_encoder

    assert is_cross_encoder(cross) and not is_cross_encoder(bi) and not is_cross_encoder(tmp_path)
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "modules.json").write_text("{}")
    with pytest.raises(ValueError, match=r"modules\.json should hold a list of modules"):
        inspect_source(tmp_path / "bad")


def test_inspect_says_the_saved_dtype(tmp_path):
    model = model_of(bertkit.BERTForMaskedLM)
    assert inspect_source(save(tmp_path / "bf16", model.to(torch.bfloat16))).dtype == "bf16"
    model = model_of(bertkit.BERTForMaskedLM)
    model.save_pretrained(tmp_path / "int8", dtype="int8")
    assert inspect_source(tmp_path / "int8").dtype == "int8"


def test_inspect_a_tf_checkpoint_reads_the_task_from_its_heads(tmp_path):
    from bertkit.weights.convert import convert

    source = save(tmp_path / "hf", model_of(bertkit.BERTForPreTraining))
    convert(source, tmp_path / "tf", to="tf")
    info = inspect_source(tmp_path / "tf")  # bert_config.json records no architecture
    assert (info.layout, info.architecture, info.task, info.dtype) == ("checkpoint", "BertForPreTraining",
                                                                       "fill-mask", None)
    assert info.describe().startswith("layout checkpoint, architecture BertForPreTraining, task fill-mask")


# ----------------------------------------------------------------------------------- the server reads the table
def test_the_served_routes_are_the_tables(tmp_path, monkeypatch):
    """Every route of a row has a handler, every served task a POST / handler; and the app registers what the
    table lists: a route added to a row is served."""
    pytest.importorskip("fastapi")
    from fastapi.testclient import TestClient

    from bertkit.serving import create_app, routes
    from bertkit.tasks import table

    assert set(routes.HANDLERS) == set(table.table_routes())
    assert set(routes.ROOT) == set(served_tasks())
    source = save(tmp_path / "mlm", model_of(bertkit.BERTForMaskedLM, vocab_size=5 + len(WORDS)))
    fill_mask = find_task("fill-mask")
    extended = tuple(table.TaskRow(**{**row.__dict__, "routes": (*row.routes, "/unmask")}) if row is fill_mask
                     else row for row in TABLE)
    monkeypatch.setattr(table, "TABLE", extended)
    with pytest.raises(ValueError, match=r"lists the routes \['/unmask'\], which no handler answers"):
        create_app(source)
    monkeypatch.setitem(routes.HANDLERS, "/unmask", routes.HANDLERS["/fill-mask"])
    app = create_app(source)
    posted = {route.path for route in app.routes if "POST" in getattr(route, "methods", ())}
    assert posted == {*table.table_routes(), *routes.ALWAYS, "/"} and "/unmask" in posted
    with TestClient(app) as client:
        assert client.get("/info").json()["task"] == "fill-mask"
        answer = client.post("/unmask", json={"inputs": "the cat [MASK] on the mat", "top_k": 2}).json()
        assert answer == client.post("/fill-mask", json={"inputs": "the cat [MASK] on the mat", "top_k": 2}).json()
        assert client.post("/embed", json={"inputs": "a"}).status_code == 424


def test_info_says_what_a_directory_holds(tmp_path, capsys):
    from bertkit.cli import main

    labels = {0: "negative", 1: "positive"}
    save(tmp_path / "classifier", model_of(bertkit.BERTForSequenceClassification, num_labels=2, id2label=labels))
    assert main(["info", str(tmp_path / "classifier")]) == 0
    held = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("holds: "))
    assert held == ("holds: layout hf (cross-encoder), architecture BertForSequenceClassification, task "
                    "text-classification, labels ['negative', 'positive'], max length not recorded (takes 40), "
                    "saved fp32")
    assert bertkit.tasks.inspect_source(tmp_path / "classifier").labels == ("negative", "positive")


def test_inspect_an_archive_and_a_registered_name(tmp_path, monkeypatch):
    import tarfile

    from bertkit.weights import download

    source = save(tmp_path / "tagger", model_of(bertkit.BERTForTokenClassification, num_labels=2))
    with tarfile.open(tmp_path / "tagger.tar.gz", "w:gz") as archive:
        archive.add(source, arcname="tagger")
    info = inspect_source(tmp_path / "tagger.tar.gz")  # the config is inside: read with the weights
    assert (info.layout, info.architecture, info.task, info.labels) == ("checkpoint", "BertForTokenClassification",
                                                                        "token-classification", ("LABEL_0", "LABEL_1"))
    monkeypatch.setattr(download, "resolve_source", lambda name: source if name == "tiny-tagger" else name)
    info = inspect_source("tiny-tagger")  # a registered name: what the cache holds for it
    assert (info.source, info.path, info.task) == ("tiny-tagger", source, "token-classification")
