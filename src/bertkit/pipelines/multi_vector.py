"""``multi-vector``: a late-interaction (ColBERT) model's token vectors, and MaxSim scores of (query, text) pairs.

The model is a ColBERT directory (sentence-transformers 6, PyLate or Stanford: :class:`bertkit.MultiVectorEncoder`,
its markers, query expansion, projection and skiplist) or a BGE-M3 directory (its ``colbert_linear.pt``: the
``colbert_vecs`` of :class:`bertkit.BGEM3`). ``task`` picks the side: ``"query"`` (``encode_query``: the query
prompt or marker, expansion to the query width) or ``"document"`` (``encode_document``; also None). Answers:
``output="tokens"``: each text's ``[n, D]`` vectors (those it is scored by: after the projection and the skiplist)
as lists (``"arrays"``: float32 arrays); ``output="scores"``: each ``(query, text)`` pair's MaxSim (the model's
own: ``meanmaxsim`` divides by the query's vector count, BGE-M3's ColBERT score is that mean too). A text that
leaves no vector (only skiplist tokens) is a ValueError quoting it.

:meth:`MultiVectorPipeline.fit` counts a side's tokens (markers and special tokens included) and cuts texts
exactly to the side's width at either end: what a server checks a request against.
"""

from __future__ import annotations

import os
from typing import Any, ClassVar

import numpy as np
import torch

from bertkit.pipelines.base import Pipeline
from bertkit.sentence.bge_m3 import BGEM3Encoder
from bertkit.sentence.maxsim import maxsim_scores
from bertkit.sentence.multi_vector import MultiVectorEncoder
from bertkit.sentence.sides import side_prompts
from bertkit.tasks.sources import COLBERT_LAYOUTS, inspect_source
from bertkit.tokenization.cut import CHARS_PER_TOKEN

OUTPUTS = ("tokens", "arrays", "scores")
SIDES = ("query", "document", None)


class MultiVectorPipeline(Pipeline):
    task = "multi-vector"
    defaults: ClassVar[dict[str, Any]] = {"task": None, "prompt_name": None, "output": "tokens"}
    input_description = "a text (a (query, text) pair for output='scores')"

    @classmethod
    def from_source(cls, source: str | os.PathLike, **options: Any) -> Pipeline:
        """A ColBERT directory loads as :class:`bertkit.MultiVectorEncoder`, a BGE-M3 one as its encoder with the
        ColBERT head; anything else is a ValueError naming what to give."""
        kind = inspect_source(source).multi_vector
        if kind in COLBERT_LAYOUTS:
            model = MultiVectorEncoder(source, options.get("device"), dtype=options.get("dtype", "auto"))
        elif kind == "bge-m3":
            model = BGEM3Encoder(source, options.get("device"), dtype=options.get("dtype", "auto"),
                                 heads=("colbert",))
        else:
            raise ValueError(f"{os.fspath(source)} holds no multi-vector model: give a ColBERT directory "
                             "(sentence-transformers MultiVectorEncoder, PyLate or Stanford ColBERT) or a BGE-M3 "
                             "directory with colbert_linear.pt.")
        return cls(model, model.tokenizer, **options)

    @property
    def colbert(self) -> bool:
        """A ColBERT directory's model (markers, expansion, skiplist); False for BGE-M3's head."""
        return isinstance(self.model, MultiVectorEncoder)

    def place(self, device: str | torch.device | None, dtype: Any, max_length: int | None) -> tuple[Any, int]:
        """The model placed itself when it loaded; the pipeline's length is the document side's."""
        limit = self.model.document_length if self.colbert else self.model.max_length
        return self.model.dtype_choice, min(max_length or limit, limit)

    def check(self, params: dict[str, Any]) -> dict[str, Any]:
        params = super().check(params)
        if params["task"] not in SIDES:
            raise ValueError(f"task must be 'query', 'document' or None (a document), got {params['task']!r}.")
        if params["output"] not in OUTPUTS:
            raise ValueError(f"output must be one of {OUTPUTS}, got {params['output']!r}.")
        self.prompt(params["prompt_name"], params["task"])  # ValueError naming the prompts there are
        return params

    @property
    def dimension(self) -> int:
        """The width of each token vector."""
        if self.colbert:
            return self.model.get_sentence_embedding_dimension()
        return self.model.colbert_linear.out_features

    # --------------------------------------------------------------------------------------------- sides
    def prompt(self, prompt_name: str | None, task: str | None = None) -> str:
        """The text put before each input of side ``task``: ``prompt_name``'s prompt, else that side's own, as
        ``encode_query`` / ``encode_document`` pick it (markers included). BGE-M3 has none."""
        if not self.colbert:
            if prompt_name is not None:
                raise ValueError(f"prompt_name {prompt_name!r}: a BGE-M3 model has no prompts.")
            return ""
        prompts = self.model.prompts
        if prompt_name is None:
            prompt_name = side_prompts(prompts)["query" if task == "query" else "document"]
        return self.model.prompt(prompt_name)

    def width(self, task: str | None) -> int:
        """The tokens a text of side ``task`` may take, special tokens and marker included: the query width (the
        expansion length under ``fixed``) or the document length, as :meth:`MultiVectorEncoder.features` cuts."""
        if not self.colbert:
            return self.max_length
        model = self.model
        if task != "query":
            return min(model.document_length, self.max_length)
        expansion, length = model.query_expansion, model.query_length
        if expansion is not None and expansion["strategy"] == "fixed":
            return expansion["length"]
        return max(length, expansion["length"]) if expansion is not None else length

    def fit(self, texts: list[str], prefix: str, task: str | None, side: str = "right",
            truncate: bool = False) -> tuple[list[str], list[int]]:
        """``(texts, counts)``: each text's tokens after ``prefix`` on side ``task`` (special tokens and marker
        included); with ``truncate``, each text cut at ``side`` (``right``: its end goes) to exactly the tokens that
        fit :meth:`width`, counts capped. ValueError when ``prefix`` alone fills the width."""
        width = self.width(task)
        marker = next((m for m in getattr(self.model, "marker_ids", {}) if prefix.startswith(m)), None)
        rest = prefix[len(marker):] if marker else prefix
        lower = self.colbert and self.model.layout.do_lower_case
        cap = CHARS_PER_TOKEN * width  # a huge text costs what its kept part costs
        if truncate:
            texts = [t[:cap] if side == "right" else t[-cap:] for t in texts]
        texts = [t.lower() for t in texts] if lower else list(texts)
        rest = rest.lower() if lower else rest
        if not texts:
            return [], []
        encoded = self.tokenizer([rest + t for t in texts], return_offsets_mapping=True,
                                 return_special_tokens_mask=True)
        counts, kept = [], []
        for text, ids, offsets, special in zip(texts, encoded["input_ids"], encoded["offset_mapping"],
                                               encoded["special_tokens_mask"]):
            count = len(ids) + (marker is not None)
            if not truncate or count <= width:
                counts.append(count)
                kept.append(text)
                continue
            own = [(a - len(rest), b - len(rest)) for (a, b), s in zip(offsets, special) if not s and a >= len(rest)]
            room = width - (count - len(own))  # the tokens left for the text itself
            if room < 1:
                raise ValueError(f"the prompt {prefix!r} and the special tokens fill the {task or 'document'} width "
                                 f"of {width} tokens: no room for text; use a shorter prompt.")
            kept.append(text[:own[room - 1][1]] if side == "right" else text[own[-room][0]:])
            counts.append(width)
        return kept, counts

    # --------------------------------------------------------------------------------------------- answers
    def run(self, items: list[Any], params: dict[str, Any]) -> list[Any]:
        if params["output"] != "scores":
            self._texts(items)
            vectors = self.vectors(items, params["task"], self.prompt(params["prompt_name"], params["task"]))
            return vectors if params["output"] == "arrays" else [v.tolist() for v in vectors]
        if not all(isinstance(i, tuple | list) and len(i) == 2 and all(isinstance(t, str) for t in i) for i in items):
            raise ValueError("output='scores' takes (query, text) pairs of strings.")
        queries = list(dict.fromkeys(q for q, _ in items))
        texts = list(dict.fromkeys(t for _, t in items))
        q_vectors = dict(zip(queries, self.vectors(queries, "query", self.prompt(None, "query"))))
        d_vectors = dict(zip(texts, self.vectors(texts, "document", self.prompt(None, "document"))))
        scores = []
        for query, text in items:  # each pair's own score: requests batched together score apart
            scores.append(float(maxsim_scores([q_vectors[query]], [d_vectors[text]],
                                              length_normalize=self.mean_maxsim)[0, 0]))
        return scores

    @property
    def mean_maxsim(self) -> bool:
        """Whether a score is divided by the query's vector count (``meanmaxsim``; BGE-M3's ColBERT score)."""
        return not self.colbert or self.model.similarity_fn_name == "meanmaxsim"

    def vectors(self, texts: list[str], task: str | None, prefix: str) -> list[np.ndarray]:
        """Each text's ``[n, D]`` float32 vectors on side ``task`` after ``prefix``; ValueError quoting a text that
        leaves none (only skiplist tokens)."""
        if self.colbert:
            out = self.model.encode(texts, prompt=prefix, task="query" if task == "query" else "document",
                                    batch_size=self.batch_size, batch_tokens=self.batch_tokens,
                                    show_progress_bar=False, convert_to_numpy=True)
        else:
            def colbert(outputs: Any, rows: list[dict]) -> list[np.ndarray]:
                return [outputs.colbert[i, :len(row["input_ids"]) - 1].float().cpu().numpy()
                        for i, row in enumerate(rows)]

            out = self.model.run_texts(texts, self.batch_size, colbert, self.max_length)
        self.finite(*out)
        for text, vectors in zip(texts, out):
            if not len(vectors):
                raise ValueError(f"the text {text[:60]!r} leaves no token vector (its tokens are all on the model's "
                                 "skiplist, e.g. punctuation): drop it or send text with words.")
        return out

    def _texts(self, items: list[Any]) -> None:
        bad = next((item for item in items if not isinstance(item, str)), None)
        if bad is not None:
            raise ValueError(f"{self.task} takes texts (its markers and query expansion are added to text), got "
                             f"{str(bad)[:80]}.")
