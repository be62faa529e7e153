"""Continuing pretraining from a checkpoint (``init_from``): loading it with the heads it lacks, and the checks
that it fits the data and the run.

:func:`continue_from` loads a masked-LM checkpoint as a :class:`~bertkit.BERTForPreTraining`;
:func:`continue_electra_from` an ELECTRA discriminator with its generator (found by :func:`electra_checkpoints`,
or a new one :func:`default_generator_size` as wide). The checks, which :mod:`bertkit.tasks.pretraining` runs
before training, raise a one-line error naming the flag to change: the data must be built with the checkpoint's
tokenizer and fit its position embeddings, and a resumed run must continue from the same checkpoint.
"""

from __future__ import annotations

import logging
import os
import warnings
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch

from bertkit.config import BERTConfig
from bertkit.data.mixture import PretrainingData, data_parts
from bertkit.data.shards import PretrainingDataset
from bertkit.modeling import BERTForMaskedLM, BERTForPreTraining
from bertkit.modeling.electra import ELECTRAForPreTraining, ELECTRAForPretrainingRTD, generator_config
from bertkit.tasks.sources import LoadedSource, load_source
from bertkit.tokenization.files import tokenizer_differences, tokenizer_fingerprint
from bertkit.training.rundir import FollowerRun, RunDirectory, RunDirectoryError
from bertkit.weights.adapt import LoadWarning

logger = logging.getLogger("bertkit.pretraining")

#: a pretraining run's layout (read back by :func:`electra_checkpoints`): its model, in HF format with the tokenizer
MODEL_DIR = "model"
#: where an ELECTRA run puts its generator, beside the discriminator in MODEL_DIR
GENERATOR_DIR = "generator"

#: what a continued run keeps of a checkpoint without NSP when NSP is off: initialised, never trained or used
_UNUSED_WITHOUT_NSP = ("cls.seq_relationship.", "bert.pooler.")


def default_generator_size(hidden_size: int) -> float:
    """ELECTRA's generator width over the discriminator's: 1/3 for the base size (hidden 768), 1/4 otherwise
    (Small, Large), as the paper trained them."""
    return 1 / 3 if hidden_size == 768 else 0.25


def continue_from(source: str | os.PathLike, *, model: Any = None, seed: int = 42, nsp: bool = False,
                  model_overrides: dict[str, Any] | None = None) -> LoadedSource:
    """The checkpoint ``source`` as a :class:`BERTForPreTraining` with its tokenizer, ready to pretrain further.

    ``source`` is anything :func:`bertkit.tasks.sources.load_source` reads. A head the checkpoint
    lacks is initialised (from ``seed``): a fresh MLM head for a bare encoder, a fresh NSP head and
    pooler for an MLM-only checkpoint; each is a :class:`~bertkit.LoadWarning`, except the NSP head
    and pooler when ``nsp`` is off (never trained nor used then: logged instead). ``model_overrides``
    change the checkpoint's config (e.g. dropout); ``model`` must be None (``ValueError``: a size and
    a checkpoint are alternatives).
    """
    if model is not None:
        raise ValueError(f"model={model!r} (--model) and init_from={os.fspath(source)!r} (--init-from) are "
                         "alternatives: a size trains from scratch, a checkpoint brings its own size. Pass one.")
    torch.manual_seed(seed)  # the heads the checkpoint lacks are a function of the seed
    init = load_source(source, BERTForPreTraining, warn=False, **(model_overrides or {}))
    report = init.model.load_report
    unused = [k for k in report.initialized if k.startswith(_UNUSED_WITHOUT_NSP)] if not nsp else []
    if unused:
        logger.info("%s has no NSP head: it gets a fresh one (unused: next-sentence prediction is off)", init.source)
    kept = replace(report, initialized=[k for k in report.initialized if k not in unused])
    for message in kept.adaptations(type(init.model).__name__):
        warnings.warn(f"{init.source}: {message}", LoadWarning, stacklevel=3)
    return init


def electra_checkpoints(source: str | os.PathLike) -> tuple[str | os.PathLike, Path | None]:
    """Where an ELECTRA source's discriminator and generator lie: ``discriminator/`` and ``generator/`` inside it
    (:meth:`ELECTRAForPretrainingRTD.save_pretrained`, Google's pair), a run of ``pretrain --objective electra``
    (``model/`` and ``generator/``), or the discriminator itself (any source :func:`load_source` reads), its
    generator the ``generator/`` beside it when it is such a pair's ``discriminator/`` or ``model/`` (else None)."""
    path = Path(source)
    for name in ("discriminator", MODEL_DIR):
        if (path / name).is_dir() and (path / GENERATOR_DIR).is_dir():
            return path / name, path / GENERATOR_DIR
    if path.name in ("discriminator", MODEL_DIR) and (path.parent / GENERATOR_DIR).is_dir():
        return path, path.parent / GENERATOR_DIR
    return source, None


def continue_electra_from(source: str | os.PathLike, *, model: Any = None, seed: int = 42,
                          generator_size: float | None = None,
                          model_overrides: dict[str, Any] | None = None) -> LoadedSource:
    """An ELECTRA discriminator and generator (:func:`electra_checkpoints`) as :class:`ELECTRAForPretrainingRTD`,
    with the discriminator's tokenizer, ready to pretrain further: a ``LoadedSource`` whose ``model`` is the pair.

    Without a generator a fresh one is built (``generator_size``, default :func:`default_generator_size`) over the
    discriminator's embeddings; with one, ``generator_size`` is a ``ValueError``. The two share embeddings when
    theirs are equal (ELECTRA's pairs). ``ValueError`` when the discriminator is not an ELECTRA checkpoint, or
    ``model`` is given (a size and a checkpoint are alternatives). ``model_overrides`` apply to both.
    """
    from bertkit.tasks.sources import source_config

    if model is not None:
        raise ValueError(f"model={model!r} (--model) and init_from={os.fspath(source)!r} (--init-from) are "
                         "alternatives: a size trains from scratch, a checkpoint brings its own size. Pass one.")
    discriminator_source, generator_source = electra_checkpoints(source)
    family = source_config(discriminator_source).family
    if family != "electra":
        raise ValueError(f"objective='electra' (--objective electra) continues an ELECTRA discriminator, but "
                         f"{os.fspath(discriminator_source)} (--init-from) is a {family!r} checkpoint; pretrain it "
                         "with the masked-LM objective, or start ELECTRA from a size (--model).")
    torch.manual_seed(seed)  # a missing head or generator is a function of the seed
    overrides = model_overrides or {}
    discriminator = load_source(discriminator_source, ELECTRAForPreTraining, **overrides)
    if generator_source is None:
        ratio = generator_size or default_generator_size(discriminator.model.config.hidden_size)
        logger.warning("%s has no generator beside it: training a new one %.3g as wide, over its embeddings",
                       discriminator.source, ratio)
        pair = ELECTRAForPretrainingRTD(discriminator.model, generator_config(discriminator.model.config, ratio))
        generator_fingerprint: dict[str, Any] = {"new": ratio}
    else:
        if generator_size is not None:
            raise ValueError(f"generator_size={generator_size!r} (--generator-size) sizes a new generator, but "
                             f"{generator_source} holds {discriminator.source}'s own; leave --generator-size out.")
        generator = load_source(generator_source, BERTForMaskedLM, **overrides)
        differ = tokenizer_differences(tokenizer_fingerprint(generator.tokenizer),
                                       tokenizer_fingerprint(discriminator.tokenizer), "generator", "discriminator")
        if differ:
            raise ValueError(f"{generator_source}'s tokenizer is not {discriminator.source}'s: {'; '.join(differ)}.")
        ours, theirs = discriminator.model.bert.embeddings, generator.model.bert.embeddings
        equal = [a.shape == b.shape and torch.equal(a, b) for a, b in zip(
            ours.state_dict().values(), theirs.state_dict().values(), strict=True)]
        if not all(equal):
            logger.warning("%s: the generator's embeddings differ from the discriminator's: each keeps its own",
                           generator_source)
        pair = ELECTRAForPretrainingRTD(discriminator.model, generator.model, share_embeddings=all(equal))
        generator_fingerprint = generator.fingerprint
    named = os.path.abspath(source) if os.path.exists(source) else str(source)
    return LoadedSource(pair, discriminator.tokenizer, named, discriminator.path,
                        {"discriminator": discriminator.fingerprint, "generator": generator_fingerprint})


def _model_config(model: torch.nn.Module) -> BERTConfig:
    """The config of a pretraining model: ELECTRA's pair answers with its discriminator's."""
    return model.discriminator.config if isinstance(model, ELECTRAForPretrainingRTD) else model.config


def _check_data_fits(init: LoadedSource, data: PretrainingData) -> None:
    """``ValueError`` unless ``data`` was built with ``init``'s tokenizer and fits its position embeddings."""
    for dataset in data_parts(data):
        _check_directory_fits(init, dataset)


def _check_directory_fits(init: LoadedSource, dataset: PretrainingDataset) -> None:
    ours, theirs = tokenizer_fingerprint(init.tokenizer), tokenizer_fingerprint(dataset.load_tokenizer())
    differ = tokenizer_differences(theirs, ours, "data", "checkpoint")
    if differ:
        raise ValueError(f"{dataset.data_dir} (--data / --eval-data) was built with another tokenizer than "
                         f"{init.source}'s (--init-from): {'; '.join(differ)}. Build the data with the checkpoint's "
                         "tokenizer (bertkit data create FILES --tokenizer DIR_WITH_ITS_VOCAB ...), or pass the "
                         "text itself with --text.")
    _check_positions(init, dataset.max_seq_length, f"{dataset.data_dir} (--data) was built with max_seq_length",
                     "rebuild it with bertkit data create ... --max-seq-length")


def _check_positions(init: LoadedSource, length: int, what: str, fix: str) -> None:
    positions = _model_config(init.model).max_tokens
    if length > positions:
        raise ValueError(f"{what} {length}, more than the {positions} position embeddings of {init.source} "
                         f"(--init-from): it has no positions beyond {positions}; {fix} {positions} or less.")


def _check_init_source(run: RunDirectory | FollowerRun, init: LoadedSource | None) -> None:
    """Record where a run starts from; a resumed run must start from the same checkpoint (same content)."""
    stored = getattr(run, "info", {}).get("init_from") if run.resumed else None
    if init is None:
        if stored is not None:
            raise RunDirectoryError(f"cannot resume {run.path}: it continues pretraining from {stored['source']}; "
                                    f"pass --init-from {stored['source']} (Python: init_from=...) to resume it.")
        return
    if run.resumed and stored is None and "model" in getattr(run, "info", {}):
        raise RunDirectoryError(f"cannot resume {run.path}: it pretrains a model from scratch, not from a "
                                f"checkpoint; resume it without --init-from, or start a new run from {init.source} "
                                "(another -o, or --overwrite).")
    new = {"source": init.source, **init.fingerprint}
    if stored is not None and {k: v for k, v in stored.items() if k != "source"} != init.fingerprint:
        raise RunDirectoryError(f"cannot resume {run.path}: it continues pretraining from {stored['source']}, and "
                                f"--init-from {init.source} holds other weights or another config. Resume with "
                                f"--init-from {stored['source']}, or start a new run (another -o, or --overwrite).")
    run.record("init_from", new)  # the same content, possibly moved: keep its current path
