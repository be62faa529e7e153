"""The two sides of a retrieval model's texts, queries and documents, and the prompt each side gets when the
caller names none: ``query`` for queries, the first of :data:`DOCUMENT_PROMPTS` the model has for documents (as
sentence-transformers' ``encode_query`` / ``encode_document`` pick them)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

DOCUMENT_PROMPTS = ("document", "passage", "corpus")  # a document's default prompt names, in this order


def side_prompts(prompts: Mapping[str, str]) -> dict[str, str | None]:
    """``{"query": name, "document": name}``: the prompt name each side uses by default (None: no prompt)."""
    return {"query": "query" if "query" in prompts else None,
            "document": next((name for name in DOCUMENT_PROMPTS if name in prompts), None)}


class QueryDocumentSides:
    """``encode_query`` / ``encode_document`` of a model with ``prompts`` and an ``encode(sentences, prompt_name,
    prompt, task=..., **options)``: the side's task and, unless a prompt is given, its default prompt."""

    prompts: Mapping[str, str]

    def encode_query(self, sentences: str | Sequence[str], prompt_name: str | None = None,
                     prompt: str | None = None, **options: Any) -> Any:
        """:meth:`encode` with ``task="query"`` and, unless a prompt is given, the model's ``query`` prompt."""
        if prompt_name is None and prompt is None:
            prompt_name = side_prompts(self.prompts)["query"]
        return self.encode(sentences, prompt_name, prompt, task="query", **options)

    def encode_document(self, sentences: str | Sequence[str], prompt_name: str | None = None,
                        prompt: str | None = None, **options: Any) -> Any:
        """:meth:`encode` with ``task="document"`` and, unless a prompt is given, the first of the model's
        ``document``, ``passage``, ``corpus`` prompts it has."""
        if prompt_name is None and prompt is None:
            prompt_name = side_prompts(self.prompts)["document"]
        return self.encode(sentences, prompt_name, prompt, task="document", **options)
