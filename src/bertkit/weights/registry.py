"""The registry of released BERT checkpoints, as data (lucid's ``BERT_Weights``, torchvision's ``Weights``).

Each member of :class:`BERT_Weights` (and of the per-task enums) holds a frozen
:class:`WeightsEntry`: where the checkpoint is published, its sha256 when one was
published, its architecture as ``BERTConfig`` fields, its tokenizer casing, licence,
archive format and the shortcut names HF transformers and pytorch_pretrained_bert use
for it. Members forward those fields, so ``BERTConfig(**BERT_Weights.DEFAULT.config)``
builds the architecture and ``model.from_pretrained(weights=BERT_Weights.DEFAULT)``
downloads, converts and loads the weights (see :mod:`bertkit.weights.download`).

Sources:

* Google's original checkpoints and the 24 small BERTs are the TF1 zips linked from the
  google-research/bert README and ``multilingual.md`` (``storage.googleapis.com/bert_models``).
  Google published no checksums for them, so their ``sha256`` is ``None``: the download is
  checked for completeness (Content-Length) but not against a hash.
* The fine-tuned SQuAD / MRPC checkpoints exist only in HF's hub (``google-bert`` org,
  formerly the bare names); they are fetched file by file (``format="hf-dir"``). The hub
  serves LFS files by content hash, but no hashes are pinned here (``sha256`` is ``None``).

``lookup`` resolves a member, a member name (``"BASE_UNCASED"``, ``"BERT_Weights.DEFAULT"``),
an entry name or an alias (``"bert-base-uncased"``, ``"google/bert_uncased_L-2_H-128_A-2"``).
This module imports nothing heavier than the standard library.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from enum import Enum
from types import MappingProxyType
from typing import Any

#: ``WeightsEntry.format`` values. An archive format is unpacked and handed to
#: ``bertkit.weights.convert.convert``, which reads any checkpoint directory it holds.
FORMATS = {
    "tf1-zip": "a zip of a Google TF1 checkpoint directory (bert_config.json, bert_model.ckpt.*, vocab.txt)",
    "hf-dir": "HF-format files fetched one by one from <url><file> (config.json, model.safetensors, vocab.txt)",
    "zip": "a zip of any checkpoint directory bertkit reads (HF, pytorch_pretrained_bert, TF1)",
    "tar.gz": "a gzipped tar of any checkpoint directory bertkit reads",
}

GOOGLE_BASE_URL = "https://storage.googleapis.com/bert_models"
HF_HUB_URL = "https://huggingface.co"
#: What an ``hf-dir`` entry downloads (the tokenizer settings come from the entry itself).
HF_DIR_FILES = ("config.json", "model.safetensors", "vocab.txt")


@dataclass(frozen=True)
class WeightsEntry:
    """One published checkpoint, described as data.

    Attributes:
        name: unique id; also the cache folder name (``<cache>/hf/<name>``).
        url: the archive's address, or for ``format="hf-dir"`` the prefix each of ``files`` is appended to.
        sha256: hex digest of the archive, ``None`` where the publisher gave none; for ``hf-dir`` a
            mapping ``{file: digest}`` (files not in it are not checked).
        config: the architecture as :class:`~bertkit.BERTConfig` keyword arguments (its own field names).
        do_lower_case: whether the tokenizer lower-cases (and strips accents), as the checkpoint was trained.
        license: SPDX identifier of the weights' licence.
        format: one of :data:`FORMATS`.
        aliases: other names :func:`lookup` accepts (HF hub ids, pytorch_pretrained_bert shortcut names).
        files: for ``hf-dir``, the files under ``url`` to fetch.
        description: one line for humans.
    """

    name: str
    url: str
    sha256: str | Mapping[str, str] | None
    config: Mapping[str, Any] = field(hash=False)
    do_lower_case: bool
    license: str = "Apache-2.0"
    format: str = "tf1-zip"
    aliases: tuple[str, ...] = ()
    files: tuple[str, ...] = ()
    description: str = ""

    def __post_init__(self) -> None:
        if self.format not in FORMATS:
            raise ValueError(f"WeightsEntry {self.name!r}: format {self.format!r} is unknown; "
                             f"use one of {list(FORMATS)}.")
        if self.format == "hf-dir" and not self.files:
            raise ValueError(f"WeightsEntry {self.name!r}: an 'hf-dir' entry lists its files, e.g. {HF_DIR_FILES}.")
        if not self.name or "/" in self.name or "\\" in self.name or self.name.startswith("."):
            raise ValueError(f"WeightsEntry name {self.name!r} must be a plain folder name (no '/', not hidden).")
        # a read-only view, so no caller can change the registry through entry.config
        object.__setattr__(self, "config", MappingProxyType(dict(self.config)))
        if isinstance(self.sha256, Mapping):
            object.__setattr__(self, "sha256", MappingProxyType(dict(self.sha256)))
        object.__setattr__(self, "aliases", tuple(self.aliases))
        object.__setattr__(self, "files", tuple(self.files))

    def __eq__(self, other: object) -> bool:  # MappingProxyType has no ==; compare the contents
        if not isinstance(other, WeightsEntry):
            return NotImplemented
        return self._key() == other._key()

    def __hash__(self) -> int:
        return hash((self.name, self.url))

    def _key(self) -> tuple:
        sha = dict(self.sha256) if isinstance(self.sha256, Mapping) else self.sha256
        return (self.name, self.url, sha, dict(self.config), self.do_lower_case, self.license, self.format,
                self.aliases, self.files, self.description)

    def downloads(self) -> list[tuple[str, str]]:
        """``(url, file name)`` of every file this entry is made of, as published."""
        if self.format == "hf-dir":
            base = self.url if self.url.endswith("/") else self.url + "/"
            return [(base + f, f) for f in self.files]
        return [(self.url, self.url.rstrip("/").rsplit("/", 1)[-1])]

    def expected_sha256(self, file: str) -> str | None:
        """The published digest of ``file`` (a name from :meth:`downloads`), or None."""
        if isinstance(self.sha256, Mapping):
            return self.sha256.get(file)
        return self.sha256


class _WeightsEnum(Enum):
    """Base of the weights enums: members forward the fields of their :class:`WeightsEntry`."""

    @property
    def entry(self) -> WeightsEntry:
        return self.value

    @property
    def config(self) -> dict[str, Any]:
        """``BERTConfig`` keyword arguments (a fresh dict: change it freely)."""
        return dict(self.value.config)

    @property
    def url(self) -> str:
        return self.value.url

    @property
    def sha256(self) -> str | Mapping[str, str] | None:
        return self.value.sha256

    @property
    def do_lower_case(self) -> bool:
        return self.value.do_lower_case

    @property
    def license(self) -> str:
        return self.value.license

    @property
    def format(self) -> str:
        return self.value.format

    @property
    def aliases(self) -> tuple[str, ...]:
        return self.value.aliases

    @property
    def files(self) -> tuple[str, ...]:
        return self.value.files

    @property
    def description(self) -> str:
        return self.value.description

    def __repr__(self) -> str:
        return f"<{type(self).__name__}.{self.name}: {self.value.name}>"


# ---------------------------------------------------------------------- architectures
def _arch(layers: int, hidden: int, vocab_size: int = 30522) -> dict[str, Any]:
    """Google's ``bert_config.json`` in BERTConfig's names (heads = hidden / 64, inner = 4 * hidden)."""
    return {
        "vocab_size": vocab_size,
        "hidden_size": hidden,
        "num_attention_heads": hidden // 64,
        "num_hidden_layers": layers,
        "intermediate_size": 4 * hidden,
        "hidden_act": "gelu",
        "hidden_dropout_prob": 0.1,
        "attention_probs_dropout_prob": 0.1,
        "max_position_embeddings": 512,
        "type_vocab_size": 2,
        "initializer_range": 0.02,
        "layer_norm_eps": 1e-12,
    }


#: vocabulary sizes of Google's released vocab.txt files
_UNCASED_VOCAB, _CASED_VOCAB = 30522, 28996
_MULTI_CASED_VOCAB, _MULTI_UNCASED_VOCAB, _CHINESE_VOCAB = 119547, 105879, 21128


def _google(name: str, path: str, config: dict[str, Any], do_lower_case: bool, description: str,
            *aliases: str) -> WeightsEntry:
    return WeightsEntry(name=name, url=f"{GOOGLE_BASE_URL}/{path}", sha256=None, config=config,
                        do_lower_case=do_lower_case, format="tf1-zip", aliases=aliases, description=description)


def _original(name: str, path: str, config: dict[str, Any], do_lower_case: bool, description: str) -> WeightsEntry:
    """One of Google's 2018/2019 releases; HF's hub has it as ``<name>`` and ``google-bert/<name>``."""
    return _google(name, path, config, do_lower_case, description, name, f"google-bert/{name}")


def _small(layers: int, hidden: int) -> WeightsEntry:
    """One of the 24 small BERTs (Turc et al. 2019, "Well-Read Students Learn Better"), released 2020-02-20."""
    stem = f"uncased_L-{layers}_H-{hidden}_A-{hidden // 64}"
    return _google(f"bert_{stem}", f"2020_02_20/{stem}.zip", _arch(layers, hidden), True,
                   f"Small BERT, uncased, {layers} layers, hidden {hidden}, {hidden // 64} heads",
                   f"google/bert_{stem}")


def _hf_hub(name: str, config: dict[str, Any], do_lower_case: bool, description: str) -> WeightsEntry:
    """A checkpoint that exists only as an HF-format repository of the ``google-bert`` org."""
    return WeightsEntry(name=name, url=f"{HF_HUB_URL}/google-bert/{name}/resolve/main/", sha256=None,
                        config=config, do_lower_case=do_lower_case, format="hf-dir", files=HF_DIR_FILES,
                        aliases=(name, f"google-bert/{name}"), description=description)


_BASE_UNCASED = _original("bert-base-uncased", "2018_10_18/uncased_L-12_H-768_A-12.zip", _arch(12, 768), True,
                          "BERT-Base, Uncased: 12 layers, 768 hidden, 12 heads, 110M parameters")


class BERT_Weights(_WeightsEnum):
    """Google's pretrained BERT checkpoints (MLM + NSP heads included), lucid's ``BERT_Weights``.

    ``DEFAULT`` and ``PRE_TRAIN_BASE`` (lucid's name) are aliases of ``BASE_UNCASED``;
    ``TINY``, ``MINI``, ``SMALL``, ``MEDIUM`` are the small BERTs Google named so.
    None of these has a published sha256 (see the module docstring).
    """

    BASE_UNCASED = _BASE_UNCASED
    LARGE_UNCASED = _original("bert-large-uncased", "2018_10_18/uncased_L-24_H-1024_A-16.zip", _arch(24, 1024), True,
                              "BERT-Large, Uncased: 24 layers, 1024 hidden, 16 heads, 340M parameters")
    BASE_CASED = _original("bert-base-cased", "2018_10_18/cased_L-12_H-768_A-12.zip",
                           _arch(12, 768, _CASED_VOCAB), False,
                           "BERT-Base, Cased: 12 layers, 768 hidden, 12 heads, 110M parameters")
    LARGE_CASED = _original("bert-large-cased", "2018_10_18/cased_L-24_H-1024_A-16.zip",
                            _arch(24, 1024, _CASED_VOCAB), False,
                            "BERT-Large, Cased: 24 layers, 1024 hidden, 16 heads, 340M parameters")
    LARGE_UNCASED_WWM = _original("bert-large-uncased-whole-word-masking",
                                  "2019_05_30/wwm_uncased_L-24_H-1024_A-16.zip",
                                  _arch(24, 1024), True, "BERT-Large, Uncased (Whole Word Masking)")
    LARGE_CASED_WWM = _original("bert-large-cased-whole-word-masking", "2019_05_30/wwm_cased_L-24_H-1024_A-16.zip",
                                _arch(24, 1024, _CASED_VOCAB), False, "BERT-Large, Cased (Whole Word Masking)")
    BASE_MULTILINGUAL_CASED = _original(
        "bert-base-multilingual-cased", "2018_11_23/multi_cased_L-12_H-768_A-12.zip",
        _arch(12, 768, _MULTI_CASED_VOCAB), False, "BERT-Base, Multilingual Cased: 104 languages (recommended)")
    BASE_MULTILINGUAL_UNCASED = _original(
        "bert-base-multilingual-uncased", "2018_11_03/multilingual_L-12_H-768_A-12.zip",
        _arch(12, 768, _MULTI_UNCASED_VOCAB), True, "BERT-Base, Multilingual Uncased: 102 languages (original)")
    # HF and pytorch_pretrained_bert tokenize bert-base-chinese with do_lower_case=False; we follow them.
    BASE_CHINESE = _original("bert-base-chinese", "2018_11_03/chinese_L-12_H-768_A-12.zip",
                             _arch(12, 768, _CHINESE_VOCAB), False,
                             "BERT-Base, Chinese: Simplified and Traditional, 12 layers, 768 hidden")

    # the 24 small BERTs: L in {2, 4, 6, 8, 10, 12} x H in {128, 256, 512, 768}
    UNCASED_L2_H128_A2 = _small(2, 128)
    UNCASED_L2_H256_A4 = _small(2, 256)
    UNCASED_L2_H512_A8 = _small(2, 512)
    UNCASED_L2_H768_A12 = _small(2, 768)
    UNCASED_L4_H128_A2 = _small(4, 128)
    UNCASED_L4_H256_A4 = _small(4, 256)
    UNCASED_L4_H512_A8 = _small(4, 512)
    UNCASED_L4_H768_A12 = _small(4, 768)
    UNCASED_L6_H128_A2 = _small(6, 128)
    UNCASED_L6_H256_A4 = _small(6, 256)
    UNCASED_L6_H512_A8 = _small(6, 512)
    UNCASED_L6_H768_A12 = _small(6, 768)
    UNCASED_L8_H128_A2 = _small(8, 128)
    UNCASED_L8_H256_A4 = _small(8, 256)
    UNCASED_L8_H512_A8 = _small(8, 512)
    UNCASED_L8_H768_A12 = _small(8, 768)
    UNCASED_L10_H128_A2 = _small(10, 128)
    UNCASED_L10_H256_A4 = _small(10, 256)
    UNCASED_L10_H512_A8 = _small(10, 512)
    UNCASED_L10_H768_A12 = _small(10, 768)
    UNCASED_L12_H128_A2 = _small(12, 128)
    UNCASED_L12_H256_A4 = _small(12, 256)
    UNCASED_L12_H512_A8 = _small(12, 512)
    UNCASED_L12_H768_A12 = _small(12, 768)

    # aliases (equal values make these Enum aliases, not new members)
    TINY = UNCASED_L2_H128_A2
    MINI = UNCASED_L4_H256_A4
    SMALL = UNCASED_L4_H512_A8
    MEDIUM = UNCASED_L8_H512_A8
    PRE_TRAIN_BASE = _BASE_UNCASED
    DEFAULT = _BASE_UNCASED


_SQUAD_UNCASED = _hf_hub("bert-large-uncased-whole-word-masking-finetuned-squad", _arch(24, 1024), True,
                         "BERT-Large, Uncased (Whole Word Masking) fine-tuned on SQuAD 1.1")


class BERT_ForQuestionAnswering_Weights(_WeightsEnum):
    """SQuAD 1.1 fine-tuned checkpoints for :class:`~bertkit.BERTForQuestionAnswering` (HF hub, HF format)."""

    SQUAD1_LARGE_UNCASED_WWM = _SQUAD_UNCASED
    SQUAD1_LARGE_CASED_WWM = _hf_hub("bert-large-cased-whole-word-masking-finetuned-squad",
                                     _arch(24, 1024, _CASED_VOCAB), False,
                                     "BERT-Large, Cased (Whole Word Masking) fine-tuned on SQuAD 1.1")
    DEFAULT = _SQUAD_UNCASED


_MRPC = _hf_hub("bert-base-cased-finetuned-mrpc", {**_arch(12, 768, _CASED_VOCAB), "num_labels": 2}, False,
                "BERT-Base, Cased fine-tuned on GLUE MRPC (paraphrase: 0 = no, 1 = yes)")


class BERT_ForSequenceClassification_Weights(_WeightsEnum):
    """Sentence-pair classification checkpoints for :class:`~bertkit.BERTForSequenceClassification`."""

    MRPC_BASE_CASED = _MRPC
    DEFAULT = _MRPC


#: lucid's spelling of the per-task enum names
BERTForQuestionAnswering_Weights = BERT_ForQuestionAnswering_Weights
BERTForSequenceClassification_Weights = BERT_ForSequenceClassification_Weights

#: every weights enum, in the order :func:`lookup` searches them
WEIGHTS_ENUMS: tuple[type[_WeightsEnum], ...] = (
    BERT_Weights, BERT_ForQuestionAnswering_Weights, BERT_ForSequenceClassification_Weights,
)


def entries() -> list[WeightsEntry]:
    """Every distinct registered checkpoint (aliases counted once)."""
    seen: dict[str, WeightsEntry] = {}
    for enum in WEIGHTS_ENUMS:
        for member in enum:
            seen.setdefault(member.value.name, member.value)
    return list(seen.values())


def _names() -> Iterator[tuple[str, WeightsEntry]]:
    """Every string :func:`lookup` accepts, with its entry."""
    for enum in WEIGHTS_ENUMS:
        for member_name, member in enum.__members__.items():  # includes the aliases (DEFAULT, ...)
            yield member_name, member.value
            yield f"{enum.__name__}.{member_name}", member.value
    for entry in entries():
        yield entry.name, entry
        for alias in entry.aliases:
            yield alias, entry


def lookup(name_or_weights: str | Enum | WeightsEntry) -> WeightsEntry:
    """The :class:`WeightsEntry` for a member, an entry, or a name.

    Accepted names: member names (``"BASE_UNCASED"``; ``"BERT_Weights.DEFAULT"``), entry
    names and aliases (``"bert-base-uncased"``, ``"google-bert/bert-base-cased"``,
    ``"google/bert_uncased_L-4_H-256_A-4"``). A bare member name such as ``"DEFAULT"``
    means :class:`BERT_Weights`'s. Exact matches win; otherwise matching ignores case.
    Raises ``ValueError`` listing the closest names when nothing matches.
    """
    if isinstance(name_or_weights, WeightsEntry):
        return name_or_weights
    if isinstance(name_or_weights, _WeightsEnum):
        return name_or_weights.value
    if not isinstance(name_or_weights, str):
        raise TypeError(f"weights must be a BERT_Weights member, a WeightsEntry or a name, "
                        f"got {type(name_or_weights).__name__}.")
    table: dict[str, WeightsEntry] = {}
    for key, entry in _names():
        table.setdefault(key, entry)  # BERT_Weights first: a bare "DEFAULT" is BERT_Weights.DEFAULT
    if name_or_weights in table:
        return table[name_or_weights]
    folded: dict[str, WeightsEntry] = {}
    for key, entry in table.items():
        folded.setdefault(key.casefold(), entry)
    if name_or_weights.casefold() in folded:
        return folded[name_or_weights.casefold()]
    close = difflib.get_close_matches(name_or_weights, list(table), n=5, cutoff=0.6)
    hint = f" Did you mean {', '.join(repr(c) for c in close)}?" if close else ""
    raise ValueError(f"No registered BERT weights are called {name_or_weights!r}.{hint} "
                     "See bertkit.weights.registry.entries() for the list, or pass a local checkpoint directory.")


def is_registered(name: str) -> bool:
    """Whether :func:`lookup` resolves ``name``."""
    try:
        lookup(name)
    except ValueError:
        return False
    return True


__all__ = [
    "FORMATS", "WEIGHTS_ENUMS", "BERTForQuestionAnswering_Weights", "BERTForSequenceClassification_Weights",
    "BERT_ForQuestionAnswering_Weights", "BERT_ForSequenceClassification_Weights", "BERT_Weights", "WeightsEntry",
    "entries", "is_registered", "lookup",
]
