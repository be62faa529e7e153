"""Request bodies of every route (pydantic): text-embeddings-inference's (``/tokenize`` and ``/decode`` too),
OpenAI's embeddings, and bertkit's ``/ner``, ``/qa``, ``/fill-mask``. Unknown fields are refused (422 naming
them), except on OpenAI's route, whose clients send extras such as ``user``."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

Text = str
Pair = list[str]


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class EmbedRequest(Strict):
    inputs: Text | list[Text]
    normalize: bool = True
    truncate: bool = False


class OpenAIEmbeddingsRequest(BaseModel):
    model_config = ConfigDict(extra="allow")
    input: Text | list[Text]
    model: str | None = None
    encoding_format: Literal["float", "base64"] = "float"


class PredictRequest(Strict):
    inputs: Text | list[Text] | list[list[Text]] = Field(
        description='a text, a pair ["a", "b"], or a batch [["a"], ["b", "c"], ...]')
    raw_scores: bool = False
    truncate: bool = False


class RerankRequest(Strict):
    query: Text
    texts: list[Text]
    raw_scores: bool = False
    return_text: bool = False
    truncate: bool = False


class NerRequest(Strict):
    inputs: Text | list[Text]
    aggregation_strategy: Literal["none", "simple", "first", "average", "max"] = "simple"
    truncate: bool = False


class QAPair(Strict):
    question: Text
    context: Text


class QARequest(Strict):
    question: Text | None = None
    context: Text | None = None
    inputs: list[QAPair] | None = None
    top_k: int = Field(1, ge=1, le=100)
    max_answer_len: int = Field(15, ge=1, le=512)
    handle_impossible_answer: bool = False


class FillMaskRequest(Strict):
    inputs: Text | list[Text]
    top_k: int = Field(5, ge=1, le=1000)
    truncate: bool = False


class TokenizeRequest(Strict):
    inputs: Text | list[Text]
    add_special_tokens: bool = True


class DecodeRequest(Strict):
    ids: list[int] | list[list[int]]
    skip_special_tokens: bool = True
