"""Converting any readable checkpoint to an HF-format directory or to a Google TF1 checkpoint.

``convert(src, dst, to="hf")`` writes ``config.json`` + ``model.safetensors`` + the tokenizer
files; ``to="tf"`` writes ``bert_config.json`` + ``bert_model.ckpt.{index,data-*}`` +
``vocab.txt`` as Google released them (readable by TensorFlow and by bertkit).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np

from bertkit.io import atomic_write_text
from bertkit.modeling import (
    BERT,
    BERTForCausalLM,
    BERTForMaskedLM,
    BERTForMultipleChoice,
    BERTForNextSentencePrediction,
    BERTForPreTraining,
    BERTForQuestionAnswering,
    BERTForSequenceClassification,
    BERTForTokenClassification,
)
from bertkit.modeling.base import BERTPreTrainedModel
from bertkit.weights.adapt import adapt_state_dict, tied_aliases
from bertkit.weights.formats import Checkpoint, read_checkpoint
from bertkit.weights.tables import hf_to_tf

#: HF architecture name -> bertkit class
ARCHITECTURES = {cls.hf_architecture: cls for cls in (
    BERT, BERTForPreTraining, BERTForMaskedLM, BERTForCausalLM, BERTForNextSentencePrediction,
    BERTForSequenceClassification, BERTForMultipleChoice, BERTForTokenClassification, BERTForQuestionAnswering)}

TF_CHECKPOINT_NAME = "bert_model.ckpt"


def model_for_checkpoint(checkpoint: Checkpoint) -> BERTPreTrainedModel:
    """The bertkit model the checkpoint describes, with its weights loaded (strictly)."""
    cls = ARCHITECTURES.get(checkpoint.architecture or "") or _guess_class(checkpoint)
    model = cls(checkpoint.config)
    fitted, report = adapt_state_dict(model, checkpoint.state_dict)
    model.load_state_dict(fitted, strict=False)
    model.tie_weights()
    model.load_report = report
    return model.eval()


def _guess_class(checkpoint: Checkpoint) -> type[BERTPreTrainedModel]:
    """From the heads present (TF and ppb checkpoints do not name their architecture)."""
    names = set(checkpoint.state_dict)

    def has(prefix: str) -> bool:
        return any(n.startswith(prefix) for n in names)

    if has("cls.predictions") and has("cls.seq_relationship"):
        return BERTForPreTraining
    if has("cls.predictions"):
        return BERTForCausalLM if checkpoint.config.is_decoder else BERTForMaskedLM
    if has("cls.seq_relationship"):
        return BERTForNextSentencePrediction
    if has("qa_outputs"):
        return BERTForQuestionAnswering
    if has("classifier"):
        return BERTForSequenceClassification
    return BERT


def convert(source: str | os.PathLike, dest: str | os.PathLike, *, to: str = "hf",
            do_lower_case: bool | None = None) -> Path:
    """Read ``source`` in any supported format and write it to ``dest`` as ``to`` ("hf" or "tf").

    The tokenizer files travel along: the source's own, or a ``vocab.txt`` with
    ``do_lower_case`` taken from the argument, the source's tokenizer config, or the name
    ("cased" / "uncased", as Google names its releases), in that order.
    """
    if to not in ("hf", "tf"):
        raise ValueError(f"to must be 'hf' or 'tf', got {to!r}.")
    checkpoint = read_checkpoint(source)
    model = model_for_checkpoint(checkpoint)
    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    if to == "hf":
        model.save_pretrained(dest)
    else:
        write_tf_checkpoint(model, dest)
    _write_tokenizer(checkpoint, dest, source, do_lower_case, to)
    return dest


def write_tf_checkpoint(model: BERTPreTrainedModel, dest: str | os.PathLike) -> None:
    """``bert_config.json`` + ``bert_model.ckpt.*`` with Google's variable names (kernels ``[in, out]``)."""
    from bertkit.weights.tf_bundle import write_bundle

    dest = Path(dest)
    aliases = tied_aliases(model)
    state = {k: v.detach().cpu().float().numpy() for k, v in model.state_dict().items()
             if k not in aliases and ".decoder." not in k}
    if isinstance(model, BERT):  # a bare backbone's names lack the "bert." of Google's variables
        state = {f"bert.{k}": v for k, v in state.items()}
    tensors = {k: np.ascontiguousarray(v) for k, v in hf_to_tf(state).items()}
    write_bundle(dest / TF_CHECKPOINT_NAME, tensors)
    atomic_write_text(dest / "bert_config.json", json.dumps(model.config.to_google_dict(), indent=2) + "\n")


def _write_tokenizer(checkpoint: Checkpoint, dest: Path, source, do_lower_case: bool | None, to: str) -> None:
    """Write the checkpoint's tokenizer next to the converted weights (nothing if it has none)."""
    files = checkpoint.tokenizer_files
    if not files:
        return
    import tempfile

    from bertkit.tokenization import BERTTokenizerFast

    settings = json.loads(files["tokenizer_config.json"]) if "tokenizer_config.json" in files else {}
    if do_lower_case is None:
        do_lower_case = settings.get("do_lower_case", _casing_from_name(str(source)))
    with tempfile.TemporaryDirectory() as staging:
        for name, data in files.items():
            (Path(staging) / name).write_bytes(data)
        tokenizer = BERTTokenizerFast.from_pretrained(staging, do_lower_case=do_lower_case)
    if to == "tf":  # Google's releases carry only the vocabulary
        tokenizer.save_pretrained(dest)
        for name in ("tokenizer_config.json", "special_tokens_map.json"):
            (dest / name).unlink()
    else:
        tokenizer.save_pretrained(dest)


def _casing_from_name(name: str) -> bool:
    name = Path(name).name.lower()
    return not ("cased" in name and "uncased" not in name)
