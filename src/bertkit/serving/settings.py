"""What a server runs: the task, read from the model when ``auto``, and its limits, validated."""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass

from bertkit.checks import check_int

#: serve task -> the pipeline that answers it
PIPELINE_TASKS = {"embeddings": "embeddings", "classify": "text-classification", "ner": "token-classification",
                  "qa": "question-answering", "fill-mask": "fill-mask", "rerank": "rerank"}
TASKS = ("auto", *PIPELINE_TASKS)
DTYPES = ("fp32", "bf16")

#: HF architecture of a model class -> the serve task it answers
_BY_ARCHITECTURE = {"BertModel": "embeddings", "BertForSequenceClassification": "classify",
                    "BertForTokenClassification": "ner", "BertForQuestionAnswering": "qa",
                    "BertForMaskedLM": "fill-mask", "BertForPreTraining": "fill-mask"}


@dataclass
class ServeSettings:
    """A server's settings; ``check`` raises a ValueError naming the first bad one."""

    model: str
    task: str = "auto"
    host: str = "127.0.0.1"
    port: int = 8080
    max_batch_tokens: int = 16384
    max_concurrent_requests: int = 512
    max_client_batch_size: int = 32
    dtype: str = "fp32"
    api_key: str | None = None
    workers: int = 1
    device: str | None = None

    def check(self) -> ServeSettings:
        if self.task not in TASKS:
            raise ValueError(f"task must be one of {TASKS}, got {self.task!r}.")
        if self.dtype not in DTYPES:
            raise ValueError(f"dtype must be one of {DTYPES}, got {self.dtype!r}.")
        for name in ("max_batch_tokens", "max_concurrent_requests", "max_client_batch_size", "workers"):
            check_int(name, getattr(self, name))
        if not 0 <= self.port < 65536:
            raise ValueError(f"port must be in [0, 65535], got {self.port}.")
        if self.api_key is not None and not self.api_key.strip():
            raise ValueError("api_key is empty; give a key or leave it out.")
        return self

    def to_dict(self) -> dict:
        return asdict(self)


def resolve_task(model: str | os.PathLike, task: str = "auto") -> str:
    """``task``, or for ``auto`` the one the model answers (a sentence-transformers directory: embeddings; a
    classifier with one label: rerank, as text-embeddings-inference decides; see ``_BY_ARCHITECTURE``)."""
    if task != "auto":
        return task
    from bertkit.export.models import source_class
    from bertkit.sentence import SentenceTransformer

    cls = source_class(model)
    if cls is SentenceTransformer:
        return "embeddings"
    served = _BY_ARCHITECTURE.get(getattr(cls, "hf_architecture", ""))
    if served is None:
        raise ValueError(f"{model} holds a {cls.__name__}, which bertkit serve does not answer on its own; pass "
                         f"--task ({', '.join(PIPELINE_TASKS)}).")
    if served == "classify" and _num_labels(model) == 1:
        return "rerank"
    return served


def _num_labels(model: str | os.PathLike) -> int:
    from bertkit.tasks.sources import source_config

    return source_config(model).num_labels
