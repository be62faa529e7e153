"""What a server runs: the task, read from the model when ``auto``, and its limits, validated."""

from __future__ import annotations

import math
import os
from dataclasses import asdict, dataclass
from pathlib import Path

from bertkit.checks import check_int
from bertkit.dtypes import DTYPES
from bertkit.tasks.table import served_tasks

#: serve task -> the pipeline that answers it: the task table's rows that a server runs
PIPELINE_TASKS = {name: row.name for name, row in served_tasks().items()}
TASKS = ("auto", *PIPELINE_TASKS)
#: the heaviest answer by default: 64 MiB of JSON (32 inputs of /embed_all at 256 tokens x 384 dimensions take ~62)
MAX_RESPONSE_BYTES = 64 * 1024 * 1024
#: ``--pooling``: sentence-transformers' modes, and ``splade`` (a masked-LM head's sparse vectors)
POOLINGS = ("cls", "mean", "max", "lasttoken", "splade")


@dataclass
class ServeSettings:
    """A server's settings; ``check`` raises a ValueError naming the first bad one.

    ``max_input_length`` None: the length the model was fine-tuned at (its ``task.json``), else what the model
    takes. ``api_key`` None: no authentication; an empty or blank key is refused (a ``--api-key "$KEY"`` with
    ``KEY`` unset must not start an open server). ``max_connections`` and ``timeout_keep_alive`` bound the
    connections the server holds (see :mod:`bertkit.serving.protocol`); ``body_timeout`` the seconds a client may
    take to send its request body; ``max_response_bytes`` what one answer may weigh as JSON (beyond: 413).
    """

    #: What to serve: a directory, a checkpoint file or a registered name (anything bertkit loads).
    model: str
    #: auto (what the model holds), embeddings, classify, ner, qa, fill-mask or rerank.
    task: str = "auto"
    #: Interface to listen on; 127.0.0.1 is this machine only, 0.0.0.0 every interface.
    host: str = "127.0.0.1"
    #: TCP port to listen on.
    port: int = 8080
    #: Padded tokens per model batch; requests are batched together up to it.
    max_batch_tokens: int = 16384
    #: Requests in flight at once; beyond, 429 with Retry-After.
    max_concurrent_requests: int = 512
    #: Inputs in one request; beyond, 413.
    max_client_batch_size: int = 32
    max_input_length: int | None = None
    #: Truncate inputs past ``max_input_length`` when a request does not say (its ``truncate`` is null); else 422.
    auto_truncate: bool = False
    #: Pooling of the embeddings (cls, mean, max, lasttoken) or splade; None: the model's own, else mean.
    pooling: str | None = None
    #: The model name /info and the OpenAI route give; None: the model folder's name.
    served_model_name: str | None = None
    #: Threads that count and cut the inputs' tokens; None: the cores per worker process, 1 to 4.
    tokenization_workers: int | None = None
    #: auto, fp32, bf16, fp16 or int8: the number format the model runs in (``--dtype``).
    dtype: str = "auto"
    api_key: str | None = None
    #: Server processes sharing the port, each with its own copy of the model.
    workers: int = 1
    #: cpu (default), cuda or gpu.
    device: str | None = None
    max_connections: int = 1024
    timeout_keep_alive: float = 5.0
    body_timeout: float = 60.0
    max_response_bytes: int = MAX_RESPONSE_BYTES
    #: A multi-vector index (exact or PLAID) that ``/search`` searches; built by the served ColBERT model.
    index: str | None = None
    #: A Jina embeddings v3 task adapter (``retrieval.query``...) merged into the weights at start; None: the base
    #: weights. One per server: every request runs that task (start one server per task).
    adapter: str | None = None

    def check(self) -> ServeSettings:
        if self.task not in TASKS:
            raise ValueError(f"task must be one of {TASKS}, got {self.task!r}.")
        if self.dtype not in DTYPES:
            raise ValueError(f"dtype must be one of {DTYPES}, got {self.dtype!r}.")
        if self.pooling is not None and self.pooling not in POOLINGS:
            raise ValueError(f"pooling must be one of {POOLINGS}, got {self.pooling!r}.")
        for name in ("max_batch_tokens", "max_concurrent_requests", "max_client_batch_size", "workers",
                     "max_connections", "max_response_bytes"):
            check_int(name, getattr(self, name))
        for name in ("max_input_length", "tokenization_workers"):
            check_int(name, getattr(self, name), none_means="chosen from the model / the machine")
        for name in ("timeout_keep_alive", "body_timeout"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value <= 0:
                raise ValueError(f"{name} must be a positive number of seconds, got {value!r}.")
        if self.index is not None and not (Path(self.index) / "manifest.json").is_file():
            raise ValueError(f"--index {self.index}: no manifest.json there; give a finished index directory that "
                             "`bertkit index` built with this model.")
        if not 0 <= self.port < 65536:
            raise ValueError(f"port must be in [0, 65535], got {self.port}.")
        if self.api_key is not None and (not isinstance(self.api_key, str) or not self.api_key.strip()):
            raise ValueError("the API key is empty or blank (an unset variable in --api-key \"$KEY\"?): give a "
                             "real key, or leave --api-key and BERTKIT_API_KEY out to serve without one.")
        return self

    @property
    def name(self) -> str:
        """The model's public name (never the absolute path, which ``/info`` would show to every client):
        ``served_model_name``, else for a folder inside a bertkit run directory the run's name (``runs/emb1/model``
        -> ``emb1``; another folder of the run: ``emb1/checkpoint-500``), else the model folder's or file's own
        name."""
        from bertkit.training.rundir import RUN_FILE  # torch comes with it: not at import (--help stays quick)

        if self.served_model_name:
            return self.served_model_name
        path = Path(self.model).absolute()
        if (path.parent / RUN_FILE).is_file():  # every run's model is its folder "model": the run names it
            return path.parent.name if path.name == "model" else f"{path.parent.name}/{path.name}"
        return Path(self.model).name or str(self.model)

    @property
    def tokenizers(self) -> int:
        return self.tokenization_workers or max(1, min(4, (os.cpu_count() or 1) // max(self.workers, 1)))

    def to_dict(self) -> dict:
        return asdict(self)


def resolve_task(model: str | os.PathLike, task: str = "auto", pooling: str | None = None) -> str:
    """``task``, or for ``auto`` the one the model answers: the served name of the task table's row that
    :func:`~bertkit.tasks.sources.inspect_source` reads from it (a cross-encoder: rerank with one label, as
    text-embeddings-inference decides, else classify; a sentence-transformers directory or a bare encoder:
    embeddings; a masked-LM: fill-mask; a sentence-transformers sparse encoder: embeddings, served as
    text-embeddings-inference serves SPLADE); ``pooling="splade"``: embeddings. A model named for ``rerank`` or
    ``classify`` must hold a trained classifier: one that would score with a random head is refused, naming
    --task."""
    if task in ("rerank", "classify"):
        from bertkit.tasks.sources import require_scoring_head

        require_scoring_head(model, f"--task {task}")
    if task != "auto":
        return task
    if pooling == "splade":
        return "embeddings"
    from bertkit.tasks.sources import inspect_source

    info = inspect_source(model)
    if info.task == "sparse-embeddings":
        return "embeddings"
    row = info.row
    if row is None or row.serve is None:
        held = (info.model or info.architecture or "model").rpartition(":")[2]
        raise ValueError(f"{model} holds a {held}, which bertkit serve does not answer on its own; pass "
                         f"--task ({', '.join(PIPELINE_TASKS)}).")
    return row.serve.name


def trained_length(model: str | os.PathLike, task: str | None = None, tokenizer=None) -> int | None:
    """The ``max_seq_length`` a ``bertkit finetune`` directory was trained at (its ``task.json``), else for
    ``task`` rerank the length the cross-encoder directory was saved with
    (:func:`~bertkit.sentence.cross_encoder.saved_max_length` with its loaded ``tokenizer``: what ``bertkit
    finetune rerank`` and sentence-transformers record), else None."""
    from bertkit.tasks.sources import inspect_source

    info = inspect_source(model)
    if info.record is not None:
        return info.record["max_seq_length"]
    if task == "rerank" and tokenizer is not None and info.cross_encoder:
        from bertkit.sentence.cross_encoder import saved_max_length

        return saved_max_length(model, tokenizer)
    return None
