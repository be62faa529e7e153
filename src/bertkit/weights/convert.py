"""Converting any readable checkpoint to an HF-format directory or to a Google TF1 checkpoint.

``convert(src, dst, to="hf")`` writes ``config.json`` + ``model.safetensors`` + the tokenizer
files; ``to="tf"`` writes ``bert_config.json`` + ``bert_model.ckpt.{index,data-*}`` +
``vocab.txt`` as Google released them (readable by TensorFlow and by bertkit).

``dst`` must be new or empty unless ``overwrite=True``: a folder holding one checkpoint and
another's files beside it would load as the old one. The output is written into a sibling
folder first and takes ``dst``'s place only when complete, so a failed conversion leaves
``dst`` as it was.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np

from bertkit.config import bert_architecture_name
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
from bertkit.modeling.electra import ELECTRAForPreTraining
from bertkit.weights.adapt import load_into, tied_aliases
from bertkit.weights.formats import Checkpoint, read_checkpoint
from bertkit.weights.int8 import check_dtype, fitted_plan
from bertkit.weights.tables import hf_to_tf

#: HF architecture name -> bertkit class (BERT's names stand for every family's: ``bert_architecture_name``)
ARCHITECTURES = {cls.hf_architecture: cls for cls in (
    BERT, BERTForPreTraining, BERTForMaskedLM, BERTForCausalLM, BERTForNextSentencePrediction,
    BERTForSequenceClassification, BERTForMultipleChoice, BERTForTokenClassification, BERTForQuestionAnswering,
    ELECTRAForPreTraining)}

TF_CHECKPOINT_NAME = "bert_model.ckpt"


def model_for_checkpoint(checkpoint: Checkpoint, *, source: str | os.PathLike | None = None,
                         warn: bool = True) -> BERTPreTrainedModel:
    """The bertkit model the checkpoint describes, with its weights loaded (strictly), in eval mode.

    Loading is :func:`bertkit.weights.adapt.load_into`'s: what it adapts is in ``model.load_report``
    and, unless ``warn=False``, a ``LoadWarning`` naming ``source``.
    """
    model = class_for_checkpoint(checkpoint)(checkpoint.config)
    load_into(model, checkpoint.state_dict, source=source, warn=warn)
    return model.eval()


def class_for_checkpoint(checkpoint: Checkpoint) -> type[BERTPreTrainedModel]:
    """The bertkit class of the architecture the checkpoint records (any family's HF name), else of the heads
    present (TF and ppb checkpoints do not name their architecture)."""
    architecture = checkpoint.architecture or ""
    return ARCHITECTURES.get(architecture) or ARCHITECTURES.get(bert_architecture_name(architecture)) \
        or _guess_class(checkpoint)


def _guess_class(checkpoint: Checkpoint) -> type[BERTPreTrainedModel]:
    """From the heads present."""
    names = set(checkpoint.state_dict)

    def has(prefix: str) -> bool:
        return any(n.startswith(prefix) for n in names)

    if has("cls.predictions") and has("cls.seq_relationship"):
        return BERTForPreTraining
    if has("cls.predictions"):
        return BERTForCausalLM if checkpoint.config.is_decoder else BERTForMaskedLM
    if has("discriminator_predictions"):
        return ELECTRAForPreTraining
    if has("cls.seq_relationship"):
        return BERTForNextSentencePrediction
    if has("qa_outputs"):
        return BERTForQuestionAnswering
    if has("classifier"):
        return BERTForSequenceClassification
    return BERT


def convert(source: str | os.PathLike, dest: str | os.PathLike, *, to: str = "hf",
            do_lower_case: bool | None = None, overwrite: bool = False, dtype: str | None = None,
            prepare: Callable[[BERTPreTrainedModel, Checkpoint], None] | None = None, task: str | None = None) -> Path:
    """Read ``source`` in any supported format and write it to the folder ``dest`` as ``to`` ("hf" or "tf").

    The tokenizer files travel along: the source's own, or a ``vocab.txt`` with
    ``do_lower_case`` taken from the argument, the source's tokenizer config, or the vocabulary itself
    (capitalised word pieces: cased; see :func:`guess_do_lower_case`), in that order.

    ``dtype`` (``to="hf"``): ``"int8"`` writes an int8 checkpoint (:mod:`bertkit.weights.int8`), ``"fp32"`` float
    weights (an int8 source's dequantized ones), None the source's format. ``to="tf"`` is float32 only.
    ``prepare(model, checkpoint)`` runs on the loaded model before anything is written: a calibration that puts a
    static int8 plan on it (:func:`bertkit.tasks.calibrated.calibrator`), which ``dtype="int8"`` then writes. A
    static int8 source keeps its plan. ``task``: the task adapter of a Jina embeddings v3 checkpoint in its original
    layout, merged into the written weights (HF's ``jina_embeddings_v3`` port, which has no adapters;
    :mod:`bertkit.weights.task_adapters`); None writes its base weights.

    ``dest`` must not exist or be empty; with ``overwrite=True`` a non-empty ``dest`` has its whole
    content replaced (``source`` may then be ``dest`` itself: it is read before anything is written).
    The output is complete before it replaces ``dest``; if reading or writing fails ``dest`` is left
    as it was. Returns ``dest``. Raises ``ValueError`` for a bad ``to`` or ``dtype``, a ``dest`` that is a file
    or not empty (without ``overwrite``), and an unreadable or ill-fitting checkpoint (a
    ``FileNotFoundError`` when ``source`` holds none).
    """
    if to not in ("hf", "tf"):
        raise ValueError(f"to must be 'hf' or 'tf', got {to!r}.")
    dtype = check_dtype(dtype)
    if to == "tf" and dtype == "int8":
        raise ValueError("dtype='int8' writes bertkit's int8 format, an HF-style folder; Google's TF format holds "
                         "float32 only. Use to='hf' (bertkit convert: --to hf) for int8.")
    _check_destination(Path(dest), overwrite)  # before a long preparation; checked again when writing
    checkpoint = read_checkpoint(source, task=task)
    model = model_for_checkpoint(checkpoint, source=source)
    model.quantization = checkpoint.quantization  # saved as it came unless dtype says otherwise
    model.int8_plan = None if checkpoint.int8_plan is None else fitted_plan(checkpoint.int8_plan, model)
    if prepare is not None:  # all of it before the staging folder exists: a run killed here leaves nothing
        prepare(model, checkpoint)
    with replacing_folder(dest, overwrite) as staging:
        if to == "hf":
            model.save_pretrained(staging, dtype=dtype)
        else:
            write_tf_checkpoint(model, staging)
        _write_tokenizer(checkpoint, staging, source, do_lower_case, to)
    return Path(dest)


@contextlib.contextmanager
def replacing_folder(dest: str | os.PathLike, overwrite: bool) -> Iterator[Path]:
    """Yield an empty folder to write a checkpoint into; when the block succeeds it becomes ``dest``.

    ``dest`` must be new or empty unless ``overwrite=True`` (:func:`convert`'s rules); a failing block
    leaves ``dest`` as it was."""
    if not isinstance(overwrite, bool):
        raise TypeError(f"overwrite must be True or False, got {overwrite!r}.")
    dest = Path(dest)
    _check_destination(dest, overwrite)
    with _replacing(dest) as staging:
        yield staging


def _check_destination(dest: Path, overwrite: bool) -> None:
    if dest.exists() and not dest.is_dir():
        raise ValueError(f"{dest} is a file; the converted checkpoint is a folder. Choose a folder path.")
    held = sorted(p.name for p in dest.iterdir()) if dest.is_dir() else []
    if held and not overwrite:
        shown = ", ".join(held[:5]) + (f" ... ({len(held)} entries)" if len(held) > 5 else "")
        raise ValueError(f"{dest} is not empty (it holds {shown}); converting into it would leave two checkpoints "
                         "mixed in one folder. Pass overwrite=True (bertkit convert: --overwrite) to replace its "
                         "contents, or choose a new or empty folder.")


@contextlib.contextmanager
def _replacing(dest: Path) -> Iterator[Path]:
    """Yield an empty sibling folder of ``dest``; when the block succeeds it takes ``dest``'s place.

    The old ``dest`` is moved aside, the new folder renamed in, and only then is the old one
    deleted (or moved back if the rename fails). If the block raises, the sibling is removed and
    ``dest`` is untouched. A ``dest`` that is a link to a folder keeps the link: the folder it
    points to is replaced.
    """
    dest = dest.resolve() if dest.is_symlink() else dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    token = secrets.token_hex(4)
    staging = dest.parent / f".{dest.name}.{token}.tmp"
    staging.mkdir()
    try:
        yield staging
        if dest.is_dir():
            shutil.copymode(dest, staging)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    old = dest.parent / f".{dest.name}.{token}.old" if dest.exists() else None
    if old is not None:
        os.replace(dest, old)
    try:
        os.replace(staging, dest)
    except BaseException:
        if old is not None:
            os.replace(old, dest)
        shutil.rmtree(staging, ignore_errors=True)
        raise
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def write_tf_checkpoint(model: BERTPreTrainedModel, dest: str | os.PathLike) -> None:
    """``bert_config.json`` + ``bert_model.ckpt.*`` with Google's variable names (kernels ``[in, out]``)."""
    from bertkit.weights.tf_bundle import write_bundle

    google_config = model.config.to_google_dict()  # first: ValueError for a family Google's format lacks
    dest = Path(dest)
    aliases = tied_aliases(model)
    state = {k: v.detach().cpu().float().numpy() for k, v in model.state_dict().items()
             if k not in aliases and ".decoder." not in k}
    if isinstance(model, BERT):  # a bare backbone's names lack the "bert." of Google's variables
        state = {f"bert.{k}": v for k, v in state.items()}
    tensors = {k: np.ascontiguousarray(v) for k, v in hf_to_tf(state).items()}
    write_bundle(dest / TF_CHECKPOINT_NAME, tensors)
    atomic_write_text(dest / "bert_config.json", json.dumps(google_config, indent=2) + "\n")


def _write_tokenizer(checkpoint: Checkpoint, dest: Path, source, do_lower_case: bool | None, to: str) -> None:
    """Write the checkpoint's tokenizer next to the converted weights (nothing if it has none)."""
    files = checkpoint.tokenizer_files
    if not files:
        return
    import tempfile

    from bertkit.tokenization import BERTTokenizerFast

    settings = _tokenizer_settings(files, source)
    if do_lower_case is None:
        do_lower_case = settings.get("do_lower_case", guess_do_lower_case(str(source), files.get("vocab.txt")))
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


def _tokenizer_settings(files: dict[str, bytes], source) -> dict:
    """The checkpoint's ``tokenizer_config.json`` ({} without one); a damaged one is a ValueError naming it."""
    if "tokenizer_config.json" not in files:
        return {}
    try:
        settings = json.loads(files["tokenizer_config.json"].decode("utf-8-sig"))
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        where = f" at line {error.lineno}, column {error.colno}" if isinstance(error, json.JSONDecodeError) else ""
        raise ValueError(f"{source}: its tokenizer_config.json is not valid UTF-8 JSON ({error}{where}); fix or "
                         "remove that file.") from None
    if not isinstance(settings, dict):
        raise ValueError(f"{source}: its tokenizer_config.json holds no JSON object; fix or remove that file.")
    return settings


def guess_do_lower_case(name: str, vocab: bytes | None) -> bool:
    """``do_lower_case`` for a ``vocab.txt`` that comes without a tokenizer config (Google's releases).

    The vocabulary decides: word pieces with capitals (1 % or more of those holding a letter that has a case;
    ``[CLS]``-style specials aside) make it cased, none make it lower-cased. A vocabulary without any such
    letter (a script without case) follows the checkpoint's name as Google names its releases: ``cased``
    (not ``uncased``) is cased; anything else is lower-cased, BERT's default."""
    if vocab is not None:
        pieces = [t for t in vocab.decode("utf-8", "replace").splitlines()
                  if t and not (t.startswith("[") and t.endswith("]"))]
        with_case = [t for t in pieces if any(c.isupper() or c.islower() for c in t)]
        if with_case:
            return sum(any(c.isupper() for c in t) for t in with_case) < 0.01 * len(with_case)
    name = Path(name).name.lower()
    return not ("cased" in name and "uncased" not in name)
