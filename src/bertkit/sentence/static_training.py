"""Training a static embedding model (a token table, :class:`~bertkit.sentence.static.StaticEmbedding`) with the
embedding trainer: :class:`StaticRecipe`, which :func:`~bertkit.sentence.training.finetune_embeddings` runs when
its model is a static directory (Model2Vec or sentence-transformers ``StaticEmbedding``) or a fresh table
(:class:`StaticInit`).

Everything but the model is the bi-encoder recipe's (:class:`~bertkit.sentence.training.EmbeddingRecipe`): the
files read as batches of rows, the losses (MNRL, Matryoshka, ...), the one run directory with its checkpoints,
``--resume``, ``metrics.jsonl`` and the evaluations. What differs:

* the model is a :class:`~bertkit.sentence.static_model.StaticSentenceTransformer` (the directory read as
  sentence-transformers reads it: unknown tokens counted, the tokenizer's own truncation); a column, with its
  prompt, is tokenized by the table's own tokenizer, special tokens left out, into the flat ``input_ids`` and
  per-text ``offsets`` its ``forward`` pools (sentence-transformers' layout): a step is the mean over each text's
  token rows, and only the rows of the batch's tokens get a gradient;
* the model is saved with :func:`~bertkit.sentence.static.save_static`: one directory that loads in bertkit,
  sentence-transformers and model2vec (model2vec leaves unknown tokens out of the mean);
* the defaults are the recipe sentence-transformers published for ``static-retrieval-mrl-en-v1``
  (:data:`STATIC_DEFAULTS`, :data:`STATIC_RECIPE_DIMS`): a learning rate of 0.2, which is right for a table whose
  rows move only when their token is in the batch and would be far too high for a transformer;
* what a table has no use for is refused in one line: a pooling, ``--max-seq-length`` (every token of a text
  counts), the cached loss (it cuts a column's rows into mini-batches; a table's batch of thousands of rows fits
  in memory as it is: use ``mnrl``) and gist (its guide re-tokenizes with a transformer's tokenizer).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from bertkit.sentence.data import PairCollator
from bertkit.sentence.static import StaticEmbedding, is_static_directory, load_static
from bertkit.sentence.training import (
    BATCH_SIZE_COUNTS,
    BatchCollator,
    BiEncoder,
    EmbeddingRecipe,
    data_parallel,
    model_card,
    trained_similarity,
)

#: the Matryoshka dimensions of sentence-transformers' static-retrieval-mrl-en-v1 (a table of 1024 columns)
STATIC_RECIPE_DIMS = (1024, 768, 512, 256, 128, 64, 32)
#: its hyperparameters (1 epoch, 2048 rows a step, learning rate 0.2, 10 % warmup; the Hugging Face trainer's
#: weight decay 0, gradient clipping at 1.0 and AdamW epsilon 1e-8: with a learning rate of 0.2, the rows of rare
#: tokens, whose gradients are small, move by as much again with it as with bertkit's 1e-6), the TrainingConfig
#: of a static run where none is given
STATIC_DEFAULTS = dict(epochs=1.0, batch_size=2048, learning_rate=0.2, warmup_ratio=0.1, weight_decay=0.0,
                       max_grad_norm=1.0, adam_epsilon=1e-8, seed=42)
#: losses a static model does not train with, and why (one line each)
REFUSED_LOSSES = {
    "cached-mnrl": "it cuts each column into mini-batches of rows, and a static batch is one flat list of token "
                   "ids; a table's batch of thousands of rows fits in memory as it is: use --loss mnrl",
    "gist": "its guide model re-reads the batch with a transformer's tokenizer; use --loss mnrl",
}


@dataclass(frozen=True)
class StaticInit:
    """A fresh static table to train from: the vocabulary of ``tokenizer`` (a ``tokenizer.json`` file, or a
    directory holding one, e.g. a BERT checkpoint's) times ``dim`` columns, every entry drawn from N(0, 1) with the
    run's seed (as torch's ``EmbeddingBag`` starts, which sentence-transformers' ``StaticEmbedding(tokenizer,
    embedding_dim=...)`` uses)."""

    tokenizer: str | os.PathLike
    dim: int = 1024

    def __post_init__(self):
        if isinstance(self.dim, bool) or not isinstance(self.dim, int) or self.dim < 1:
            raise ValueError(f"--dim must be a positive integer (the table's columns, e.g. 1024), got {self.dim!r}.")

    def describe(self) -> str:
        return f"a new static table of {self.dim} columns over the vocabulary of {os.fspath(self.tokenizer)}"

    def build(self) -> StaticEmbedding:
        """The table (drawn from torch's global generator: seed it first)."""
        from tokenizers import Tokenizer

        path = Path(self.tokenizer)
        file = path / "tokenizer.json" if path.is_dir() else path
        if not file.is_file():
            raise ValueError(f"--static-from {os.fspath(self.tokenizer)}: no tokenizer.json there; give a "
                             "tokenizer.json file or a model directory holding one.")
        try:
            tokenizer = Tokenizer.from_file(os.fspath(file))
        except Exception as error:  # the Rust library's own exception type
            raise ValueError(f"--static-from {os.fspath(file)}: not a tokenizers tokenizer.json ({error}).") from None
        return StaticEmbedding(tokenizer, embedding_dim=self.dim)


def is_static_source(source: Any) -> bool:
    """Whether ``source`` (the ``model`` of :func:`~bertkit.sentence.training.finetune_embeddings`) is a static
    model: a :class:`StaticInit` or a static directory."""
    return isinstance(source, StaticInit) or (isinstance(source, (str, os.PathLike)) and is_static_directory(source))


def describe_source(source: Any) -> str:
    """What the run started from, as run.json and the model card name it."""
    return source.describe() if isinstance(source, StaticInit) else os.fspath(source)


def recipe_dims(dim: int) -> list[int]:
    """The Matryoshka dimensions of the recipe for a table of ``dim`` columns: ``dim`` and the recipe's below it."""
    return [dim, *(d for d in STATIC_RECIPE_DIMS if d < dim)]


def static_dimension(source: Any) -> int:
    """The embedding dimension of the static ``source`` (a :class:`StaticInit` or a static directory)."""
    return source.dim if isinstance(source, StaticInit) else load_static(source)[0].dim


class StaticBiEncoder(BiEncoder):
    """:class:`~bertkit.sentence.training.BiEncoder` over a static model (a
    :class:`~bertkit.sentence.static_model.StaticSentenceTransformer`): ``embed`` is its mean over each text's token
    rows (normalised where the model normalises)."""

    def embed(self, inputs: Mapping[str, torch.Tensor]) -> torch.Tensor:
        return self.model(inputs["input_ids"], inputs["offsets"])


class StaticCollator(PairCollator):
    """:class:`~bertkit.sentence.data.PairCollator` whose columns (with their prompts) are tokenized by the table's
    tokenizer into ``{"offsets": [n], "input_ids": [tokens]}`` (``tokenize``: the module's, special tokens left
    out)."""

    def __init__(self, tokenize, **options: Any):
        super().__init__(None, **options)
        self.tokenize = tokenize

    def _tokenize(self, role: str, texts: list[str]) -> dict[str, torch.Tensor]:
        prompt = self.prompt_of(role)
        encoded = self.tokenize([prompt + text for text in texts])
        # offsets first: a PairBatch counts a column's rows by its first tensor (input_ids is flat)
        return {"offsets": encoded["offsets"], "input_ids": encoded["input_ids"]}


class StaticRecipe(EmbeddingRecipe):
    """The bi-encoder recipe over a static table (module docstring): ``source`` a static directory or a
    :class:`StaticInit`; the model directory is :func:`~bertkit.sentence.static.save_static` 's."""

    def __init__(self, source, train_files, config, *, loss, data, evaluation, pooling=None):
        refuse_for_static(loss, data, pooling)
        super().__init__(source, train_files, config, loss=loss, data=data, evaluation=evaluation)

    def start(self, run, config) -> None:
        from bertkit.sentence import SentenceTransformer
        from bertkit.sentence.static_model import StaticSentenceTransformer
        from bertkit.sentence.training import RowBatchRecipe, _prompts

        RowBatchRecipe.start(self, run, config)
        torch.manual_seed(config.seed)  # a fresh table is drawn from the seed
        net = StaticSentenceTransformer.from_module(self.source.build()) if isinstance(self.source, StaticInit) \
            else SentenceTransformer(self.source, optimize=False)  # read as sentence-transformers reads it
        dimension = net.get_sentence_embedding_dimension()
        above = [d for d in self.loss.matryoshka_dims or [] if d > dimension]
        if above:
            raise ValueError(f"--matryoshka-dims {','.join(map(str, above))} is above the embedding dimension "
                             f"{dimension} of {self.source_name()}; use dimensions up to {dimension}.")
        net.similarity_fn_name = trained_similarity(self.objective) or net.similarity_fn_name
        self.prompts = _prompts(self.data.query_prompt, self.data.document_prompt)
        if self.prompts:
            net.prompts = {**net.prompts, "query": self.data.query_prompt or "",
                           "document": self.data.document_prompt or ""}
        rank, world = data_parallel()
        self.collate_fn = BatchCollator(StaticCollator(net.static.tokenize, prompts=self.prompts, rank=rank,
                                                       world_size=world,
                                                       allow_repeated_queries=self.data.allow_repeated_queries))
        self.net, self.model = net, StaticBiEncoder(net, self.objective)

    def source_name(self) -> str:
        return describe_source(self.source)

    def settings(self) -> dict[str, Any]:
        loss, data, net = self.loss, self.data, self.net
        return {"static": True, "dim": net.get_sentence_embedding_dimension(), "normalize": net.normalize_output,
                "loss": loss.name, "scale": loss.scale, "symmetric": loss.symmetric,
                "matryoshka_dims": list(loss.matryoshka_dims or []), "prompts": self.prompts, "columns": data.columns,
                "sampling": data.sampling, "batch_size": self.config.batch_size,
                "batch_size_counts": BATCH_SIZE_COUNTS, "allow_repeated_queries": data.allow_repeated_queries,
                "similarity_fn_name": net.similarity_fn_name,
                **({"encoding": data.encoding} if data.encoding != "utf-8" else {})}

    def card(self, trainer, results: Mapping[str, Any], schedule) -> str:
        from bertkit.sentence.training import evaluation_card

        net = self.net
        details = [f"static table: {net.static.embedding.num_embeddings} rows x {net.static.dim}, the mean of a "
                   f"text's token rows; normalized: {net.normalize_output}, similarity: {net.similarity_fn_name}"]
        if self.prompts:
            details.append(f"prompts: query {self.data.query_prompt or ''!r}, document "
                           f"{self.data.document_prompt or ''!r}")
        return model_card("A static embedding model trained with bertkit", ["sentence-transformers", "model2vec",
                                                                           "bertkit", "static-embeddings"],
                          self.source_name(), self.dataset, self.loss.name, self.objective,
                          self.loss.card_options(), details, trainer.config, results,
                          evaluation=evaluation_card(self.described, schedule, results))


def refuse_for_static(loss, data, pooling) -> None:
    """One line for each option a static table cannot train with (module docstring)."""
    if loss.name in REFUSED_LOSSES:
        raise ValueError(f"--loss {loss.name} does not train a static model: {REFUSED_LOSSES[loss.name]}.")
    for flag, value in (("--pooling", pooling), ("--max-seq-length", data.max_seq_length)):
        if value is not None:
            raise ValueError(f"{flag} {value!r}: a static model has no {flag[2:].replace('-', ' ')} (it is the mean "
                             f"of every token's row of its table); leave {flag} out.")
