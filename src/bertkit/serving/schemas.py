"""Request bodies of every route (pydantic): text-embeddings-inference's, as its openapi.json (v1.9) has them,
OpenAI's embeddings, and bertkit's ``/ner``, ``/qa``, ``/fill-mask``. Unknown fields are refused on the named
routes (422 naming them); OpenAI's route and ``POST /`` (which HF's ``InferenceClient`` and TEI's clients call
with their own extras) ignore them, as TEI does.

Every model is strict, the one rule for every field of every route: an integer field takes a JSON integer (not
``true``, ``12.0`` or ``"12"``), a boolean ``true`` / ``false`` (not ``1`` or ``"true"``), a text a string, as
TEI's serde reads them. :func:`bertkit.serving.bodies.validated` applies them; a field with several forms
describes them (``description``), which its error quotes."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

Text = str
Pair = list[str]
Ids = list[int]
#: TEI's ``Input``: a text or token ids, or a batch of them
Input = Text | Ids | list[Text | Ids]
INPUT_FORMS = "a text, a list of token ids (integers >= 0), or a list of texts and token-id lists"
TEXTS_FORMS = "a text or a list of texts"
#: TEI's ``TruncationDirection`` (it takes either case)
Direction = Literal["right", "left", "Right", "Left"]


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class Lenient(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True)


class _Truncation(Strict):
    truncate: bool | None = Field(None, description="cut inputs past max_input_length (null: the server's "
                                                    "--auto-truncate); otherwise they are refused with 422")
    truncation_direction: Direction = "right"


class _Embedding(_Truncation):
    inputs: Input = Field(description=INPUT_FORMS)
    prompt_name: str | None = None


class EmbedRequest(_Embedding):
    normalize: bool = True
    dimensions: int | None = Field(None, ge=1, description="keep the first dimensions (Matryoshka models)")


#: bertkit's ``task`` field (sentence-transformers' ``encode(task=...)``): which side of a sparse model encodes
TASK = Field(None, description="query or document: the side of an inference-free sparse model (its query side runs "
                               "no model), with that side's prompt; null: the model's default route")


class EmbedAllRequest(_Embedding):
    task: str | None = Field(None, description="a multi-vector (ColBERT) model's side: query (its marker and "
                                               "expansion) or document (null: document, as an index holds it)")


class EmbedSparseRequest(_Embedding):
    task: str | None = TASK


class SimilarityInput(Strict):
    source_sentence: Text
    sentences: list[Text]


class SimilarityParameters(_Truncation):
    prompt_name: str | None = None


class SimilarityRequest(Strict):
    inputs: SimilarityInput
    parameters: SimilarityParameters | None = None


class OpenAIEmbeddingsRequest(BaseModel):
    """OpenAI's fields, and ``truncate`` (null: ``--auto-truncate``; the openai SDK sends it in ``extra_body``)."""

    model_config = ConfigDict(extra="allow", strict=True)
    input: Text | Ids | list[Text] | list[Ids] = Field(
        description="a text, a list of token ids (integers >= 0), a list of texts, or a list of token-id lists")
    model: str | None = None
    encoding_format: Literal["float", "base64"] = "float"
    dimensions: int | None = Field(None, ge=1)
    user: str | None = None
    truncate: bool | None = None


class PredictRequest(_Truncation):
    inputs: Text | list[Text] | list[list[Text]] = Field(
        description='a text, a pair ["a", "b"], or a batch [["a"], ["b", "c"], ...]')
    raw_scores: bool = False


class RerankRequest(_Truncation):
    query: Text
    texts: list[Text]
    raw_scores: bool = False
    return_text: bool = False


class NerRequest(Strict):
    inputs: Text | list[Text] = Field(description=TEXTS_FORMS)
    aggregation_strategy: Literal["none", "simple", "first", "average", "max"] = "simple"
    truncate: bool | None = None


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
    inputs: Text | list[Text] = Field(description=TEXTS_FORMS)
    top_k: int = Field(5, ge=1, le=1000)
    targets: Text | list[Text] | None = Field(None, description=TEXTS_FORMS)
    truncate: bool | None = None


class TokenizeRequest(Strict):
    inputs: Text | list[Text] = Field(description=TEXTS_FORMS)
    add_special_tokens: bool = True
    prompt_name: str | None = None
    task: str | None = TASK


class SearchRequest(_Embedding):
    """bertkit's ``/search``: the best ``k`` documents of the server's multi-vector index for each query."""

    inputs: Text | list[Text] = Field(description=TEXTS_FORMS)
    k: int = Field(10, ge=1, le=1000)
    nprobe: int | None = Field(None, ge=1, le=4096, description="a PLAID index's centroids probed per query token "
                                                                "(default 4)")
    candidates: int | None = Field(None, ge=1, le=65536, description="a PLAID index's short list scored exactly "
                                                                     "(default 256, at least k)")


class DecodeRequest(Strict):
    ids: Ids | list[Ids] = Field(description="a list of token ids (integers >= 0) or a list of such lists")
    skip_special_tokens: bool = True


class ClassifyParameters(Lenient):
    """HF's Inference API's text-classification ``parameters`` (``POST /`` on a classifier)."""

    top_k: int | None = Field(None, ge=1)
    function_to_apply: Literal["softmax", "sigmoid", "none"] | None = None
    truncate: bool | None = None


class ClassifyInference(Lenient):
    inputs: Any
    parameters: ClassifyParameters | None = None


class ZeroShotParameters(Lenient):
    """HF's Inference API's zero-shot-classification ``parameters`` (``POST /`` on an NLI classifier)."""

    candidate_labels: list[str] | str = Field(description="the labels, or one comma-separated string of them")
    multi_label: bool | None = False
    hypothesis_template: str | None = None
    truncation_direction: Direction = "right"


class ZeroShotInference(Lenient):
    inputs: Text | list[Text] = Field(description=TEXTS_FORMS)
    parameters: ZeroShotParameters


class InferenceRequest(Lenient):
    """``POST /`` as HF's Inference API (``huggingface_hub.InferenceClient``) sends it: ``inputs`` and the task's
    ``parameters``; TEI's clients send a TEI route's body instead, read by that route's model."""

    inputs: Any
    parameters: dict[str, Any] | None = None
