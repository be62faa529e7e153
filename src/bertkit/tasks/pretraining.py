"""Pretraining end to end: raw text (or prepared shards) in; a BERT, its tokenizer, metrics and plots out.

:func:`pretrain` trains a :class:`~bertkit.BERTForPreTraining` on a data directory written by
:func:`bertkit.data.create_pretraining_data`, with the one training engine
(:class:`bertkit.training.Trainer`, single process or torchrun DDP). :func:`pretrain_from_text`
does everything from text files: it holds part of the text out (whole documents, or blocks
of sentences when there are too few), learns a WordPiece vocabulary, builds both data
directories and pretrains. Both own their output directory and resume exactly.
With ``init_from`` both continue pretraining a checkpoint instead (domain adaptation): any
source :func:`bertkit.tasks.sources.load_source` reads, trained further with its own tokenizer
(loaded and checked by :mod:`bertkit.tasks.pretraining_init`), the held-out set scored before and after.
:func:`evaluate_pretraining` scores held-out data the way Google reports it — MLM accuracy at
all selected positions — and also at the positions actually replaced by ``[MASK]``, each beside
the unigram baseline (always predicting the most frequent token), and NSP accuracy beside chance
(:mod:`bertkit.tasks.pretraining_eval`). Both modules' public names are importable from here too.

Two other ways to pretrain run through the same loop, data and run directory:

* ``objective="electra"``: ELECTRA's replaced-token detection
  (:class:`~bertkit.modeling.electra.ELECTRAForPretrainingRTD`): a discriminator of the size (an
  ``ELECTRAConfig``, embeddings as wide as its hidden size) and a generator ``generator_size`` as wide, sharing
  embeddings, fed the same masked batches (ELECTRA's 85% mask token / 15% unchanged split where the data is
  masked per batch). The discriminator is the run's model (``ElectraForPreTraining``), the generator lies
  beside it in ``generator/``;
* ``recipe="roberta"``: a RoBERTa (``RoBERTaConfig`` of the size, the tokenizer's special ids), MLM only, masks
  drawn per batch, sequences filled to the full length with contiguous text (see :data:`PRETRAINING_RECIPES`).

``family`` (a key of :data:`bertkit.presets.FAMILY_PRESETS`: ``"modernbert"``, ``"gte"``, ``"eurobert"``, ...)
builds that family's model of the size instead, masked-LM only, with either recipe (``recipe="roberta"``: RoBERTa's
data and masking for a model of ``family``).
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from bertkit.config import BERTConfig
from bertkit.data.mixture import (
    DataEntry,
    MixedPretrainingDataset,
    PretrainingData,
    data_parts,
    open_pretraining_data,
)
from bertkit.data.partitions import expand_inputs
from bertkit.data.shards import INDEX_NAME, PretrainingDataset
from bertkit.modeling import BERTForMaskedLM, BERTForPreTraining
from bertkit.modeling.electra import ELECTRAForPretrainingRTD, generator_config
from bertkit.presets import FAMILY_PRESETS, SIZES, preset_fields
from bertkit.tasks.pretraining_eval import _evaluate, _evaluate_before, _seeded_collator

# the evaluation's public functions, re-exported: callers import them from here
from bertkit.tasks.pretraining_eval import evaluate_pretraining as evaluate_pretraining
from bertkit.tasks.pretraining_eval import evaluate_replaced_token_detection as evaluate_replaced_token_detection
from bertkit.tasks.pretraining_eval import most_frequent_token as most_frequent_token
from bertkit.tasks.pretraining_eval import token_counts as token_counts
from bertkit.tasks.pretraining_eval import unigram_surprisal as unigram_surprisal
from bertkit.tasks.pretraining_init import (
    GENERATOR_DIR,
    MODEL_DIR,
    _check_data_fits,
    _check_init_source,
    _check_positions,
    _model_config,
    continue_electra_from,
    continue_from,
    default_generator_size,
    electra_checkpoints,
)
from bertkit.tasks.sources import LoadedSource
from bertkit.tasks.text_data import TextOptions, build_text_data
from bertkit.tokenization import BERTTokenizerFast
from bertkit.tokenization.files import tokenizer_fingerprint
from bertkit.training import TrainingConfig
from bertkit.training.distributed import launched_by_torchrun
from bertkit.training.run import Recipe, RunResult, TrainingData, run_recipe
from bertkit.training.rundir import RunDirectory, file_fingerprint
from bertkit.training.sampler import MixtureSampler

#: the held-out scores a run writes, beside its MODEL_DIR (that and an ELECTRA run's GENERATOR_DIR:
#: :mod:`bertkit.tasks.pretraining_init`)
EVALUATION_FILE = "evaluation.json"

#: ``objective``: masked-LM (BERT, RoBERTa) or ELECTRA's replaced-token detection with a generator
OBJECTIVES = ("mlm", "electra")
#: ``recipe`` -> what it fixes beyond the size's hyperparameters (:data:`bertkit.presets.RECIPES`): the model
#: family, and for RoBERTa (Liu et al., 2019) MLM only, masks drawn per batch ("dynamic masking") and sequences
#: filled to the full length (``short_seq_prob`` 0, no random B segment). Google's data layout cannot cross a
#: document boundary, so a sequence ends with its document: RoBERTa's DOC-SENTENCES rather than FULL-SENTENCES.
PRETRAINING_RECIPES: dict[str, dict[str, Any]] = {
    "bert": dict(family="bert"),
    "roberta": dict(family="roberta", next_sentence_prediction=False, dynamic_masking=True, short_seq_prob=0.0),
}
#: what a size (or a config of another family) brings to a family's base config (``FAMILY_PRESETS``)
SIZE_FIELDS = ("num_hidden_layers", "hidden_size", "num_attention_heads", "intermediate_size", "hidden_act",
               "hidden_dropout_prob", "attention_probs_dropout_prob", "initializer_range")
#: ELECTRA's masking of the batches it is fed (where the data is masked per batch): no random tokens
ELECTRA_MASKING = {"mask_replace_prob": ELECTRAForPretrainingRTD.MASK_REPLACE_PROB, "random_replace_prob": 0.0}


#: the result of :func:`pretrain` / :func:`pretrain_from_text`: the one run's
#: (:class:`~bertkit.training.run.RunResult`). ``evaluation`` (its ``results``) is what ``evaluation.json``
#: holds: the scores after training, and for a run continued from a checkpoint (``init_from``) also ``"before"``
#: and ``"after"`` (the flat keys equal ``"after"``); ``generator_dir``: an ELECTRA run's generator
#: (``model_dir`` holds its discriminator).
PretrainingResult = RunResult


def model_config(model: str | os.PathLike | BERTConfig, tokenizer: BERTTokenizerFast, max_seq_length: int, *,
                 family: str | None = None, **overrides: Any) -> BERTConfig:
    """A preset size (``tiny`` ... ``large``) or a config JSON, fitted to the tokenizer's vocabulary.

    ``family`` (``"roberta"``, ``"electra"``, ...: a key of :data:`bertkit.presets.FAMILY_PRESETS`) builds that
    family's model of the size: the family's base config with the size's :data:`SIZE_FIELDS` (those of a config
    of another family); an ELECTRA's embeddings are as wide as its hidden size. A config already of ``family`` is
    kept as it is. The special token ids are always the tokenizer's (a RoBERTa over BERT's WordPiece vocabulary
    pads with its ``[PAD]``, not with fairseq's 1), and the positions cover ``max_seq_length`` tokens (RoBERTa's
    start after the padding id).
    """
    given = None  # the fields a config JSON sets (the others are BERT's defaults, not the size's)
    if isinstance(model, BERTConfig):
        base = model.to_dict()
    elif str(model) in SIZES:
        base = preset_fields(str(model))
    elif Path(model).is_file():
        base = BERTConfig.from_json_file(model).to_dict()
        given = set(json.loads(Path(model).read_text(encoding="utf-8")))
    else:
        raise ValueError(f"model must be one of {list(SIZES)} or a config JSON file, got {model!r}.")
    if family is not None and base.get("family", "bert") != family:
        if family not in FAMILY_PRESETS:
            raise ValueError(f"family must be one of {list(FAMILY_PRESETS)}, got {family!r}.")
        # a field the JSON leaves unset keeps the family's value (EuroBERT's silu, ModernBERT's dropout 0)
        size = {k: base[k] for k in SIZE_FIELDS if k in base and (given is None or k in given)}
        base = {**FAMILY_PRESETS[family], **size}
        if family == "electra":  # not ELECTRA-base's 768: as wide as this size (and its overrides)
            base["embedding_size"] = overrides.get("hidden_size", base.get("hidden_size", 768))
    special = {f"{name}_id": tokenizer.vocab[tok] for name, tok in tokenizer.special_tokens.items()}
    base.update(vocab_size=tokenizer.vocab_size, **special)
    base["max_position_embeddings"] = max(base.get("max_position_embeddings", 512), max_seq_length)
    base.pop("id2label", None)
    config = BERTConfig(**{**base, **overrides})
    if config.max_tokens < max_seq_length and "max_position_embeddings" not in overrides:
        config = config.replace(max_position_embeddings=max_seq_length + config.position_offset)
    return config


def pretrain(data_dir: DataEntry | list[DataEntry], output_dir: str | os.PathLike, *,
             model: str | os.PathLike | BERTConfig | None = None, init_from: str | os.PathLike | None = None,
             training: TrainingConfig | None = None,
             eval_data_dir: str | os.PathLike | None = None, resume: bool = False, overwrite: bool = False,
             apply_changes: bool = False, next_sentence_prediction: bool | None = None,
             model_overrides: dict[str, Any] | None = None, masking: dict[str, Any] | None = None,
             objective: str = "mlm", recipe: str = "bert", generator_size: float | None = None,
             family: str | None = None, callbacks=None) -> PretrainingResult:
    """Pretrain on ``data_dir``; save the model and tokenizer (HF format) under ``output_dir/model``.

    ``data_dir`` is a directory written by :func:`bertkit.data.create_pretraining_data`, or several to
    mix: a list of paths (concatenated: each instance once per epoch), of ``(path, weight)`` pairs or of
    ``"path:weight"`` strings (drawn in those proportions by
    :class:`~bertkit.training.sampler.MixtureSampler`); see :func:`bertkit.data.mixture.parse_data_specs`.
    Mixed directories must share tokenizer, sequence length and masking (``ValueError`` otherwise).

    ``model`` is a size (default ``tiny``), a config JSON or a :class:`BERTConfig` to train from
    scratch; ``init_from`` (its alternative) a checkpoint to continue pretraining, see
    :func:`continue_from`: the data must then be built with the checkpoint's tokenizer and
    sequences no longer than its position embeddings (``ValueError`` otherwise).

    ``output_dir`` is owned by the run (:class:`~bertkit.training.rundir.RunDirectory`): it
    must be new or empty unless ``resume`` (continue the run it holds from its latest
    checkpoint; a run without a checkpoint yet starts again) or ``overwrite`` (replace it
    once this run's first checkpoint exists). Resuming against a different model config,
    tokenizer or data is refused; changed hyperparameters are refused unless ``apply_changes``.

    ``masking`` overrides the training collator's masking (e.g. ``mask_replace_prob``);
    evaluation always masks as BERT does (15%, 80/10/10), except ELECTRA's replaced-token detection, scored on
    held-out batches masked as it trains (:func:`evaluate_replaced_token_detection`). ``next_sentence_prediction=False``
    trains the MLM head alone (the NSP head stays as initialised and is not evaluated); None: on for BERT, off
    otherwise (True with ``objective="electra"`` or ``recipe="roberta"`` is a ``ValueError``).

    ``objective="electra"`` trains ELECTRA's discriminator and generator (see the module doc;
    ``generator_size``: the generator's width over the discriminator's, default the paper's: 1/3 for the base
    size, 1/4 otherwise); ``init_from`` then continues an ELECTRA pair (see :func:`continue_electra_from`).
    ``recipe="roberta"`` trains a RoBERTa as :data:`PRETRAINING_RECIPES` says: statically masked data is
    refused (``ValueError``), as is ``init_from``. ``family`` (see the module doc) builds that family's model of the
    size, masked-LM only (not with ``init_from`` or ``objective="electra"``).
    ``training.seed`` seeds the model's initialisation, the masks, dropout and the data order:
    the same seed gives the same run.
    The metrics go to ``metrics.jsonl``, a plot of the curves to ``metrics.png`` (with
    matplotlib), the held-out evaluation to ``evaluation.json``.
    """
    training = training or TrainingConfig(max_steps=1000, learning_rate=1e-3, warmup_ratio=0.1)
    how = pretraining_setup(objective, recipe, next_sentence_prediction, init_from, generator_size, family)
    dataset = open_pretraining_data(data_dir)
    eval_dataset = PretrainingDataset(eval_data_dir) if eval_data_dir is not None else None
    if how.dynamic_masking:
        for part in data_parts(dataset):
            if part.static_masking:
                raise ValueError(f"{part.data_dir} (--data) was masked once when it was built (bertkit data create "
                                 f"--static-masking), but recipe={recipe!r} (--recipe {recipe}) draws new masks for "
                                 "every batch; build the data without --static-masking.")
    init = None
    if init_from is not None:
        init = _load_init(init_from, model, training.seed, how, model_overrides)
        for data in (dataset, eval_dataset):
            if data is not None:
                _check_data_fits(init, data)
    recipe = Pretraining(how, dataset, eval_dataset, model=model, init=init, model_overrides=model_overrides,
                         masking=masking)
    return run_recipe(recipe, training, output_dir=output_dir, resume=resume, overwrite=overwrite,
                      apply_changes=apply_changes, callbacks=callbacks)


@dataclass(frozen=True)
class PretrainingSetup:
    """What a run trains, once :func:`pretraining_setup` checked its arguments: the objective, the recipe and what
    they imply."""

    objective: str
    recipe: str
    nsp: bool
    family: str | None  # None: the model's own (a config JSON / checkpoint), BERT for a size
    dynamic_masking: bool
    short_seq_prob: float | None  # of data built from text; None: Google's default
    generator_size: float | None
    family_switch: bool = False  # the family was asked for (``family=``, --family), not implied by the recipe

    @property
    def electra(self) -> bool:
        return self.objective == "electra"

    def task(self, generator: BERTConfig | None = None, generator_size: float | None = None) -> dict[str, Any]:
        """run.json's ``task``: BERT's MLM runs keep the bare name they always had; an ELECTRA run adds its
        generator's config and the width ratio it was built with (None: loaded with ``init_from``)."""
        task: dict[str, Any] = {"name": "pretraining"}
        if self.recipe != "bert":
            task["recipe"] = self.recipe
        if self.family_switch:
            task["family"] = self.family
        if self.electra:
            task |= {"objective": self.objective, "generator_size": generator_size, "generator": generator.to_dict()}
        return task


def pretraining_setup(objective: str = "mlm", recipe: str = "bert", nsp: bool | None = None, init_from=None,
                      generator_size: float | None = None, family: str | None = None) -> PretrainingSetup:
    """Check a run's combination of objective, recipe, NSP (None: on for BERT's MLM only), ``init_from``,
    generator width and model family (``ValueError`` naming the CLI flags) and resolve what it implies."""
    if objective not in OBJECTIVES:
        raise ValueError(f"objective must be one of {list(OBJECTIVES)}, got {objective!r}.")
    if recipe not in PRETRAINING_RECIPES:
        raise ValueError(f"recipe must be one of {list(PRETRAINING_RECIPES)}, got {recipe!r}.")
    spec = PRETRAINING_RECIPES[recipe]
    if objective == "electra" and recipe != "bert":
        raise ValueError(f"objective='electra' (--objective electra) and recipe={recipe!r} (--recipe {recipe}) are "
                         "alternatives: ELECTRA trains its own discriminator and generator; pass one.")
    if objective == "electra" and nsp:
        raise ValueError("next_sentence_prediction=True (--nsp) does not combine with objective='electra' "
                         "(--objective electra): ELECTRA's discriminator detects replaced tokens and has no "
                         "next-sentence head; leave --nsp out.")
    if spec.get("next_sentence_prediction") is False and nsp:
        raise ValueError(f"next_sentence_prediction=True (--nsp) does not combine with recipe={recipe!r} (--recipe "
                         f"{recipe}): it pretrains with masked-LM alone (no next-sentence head); leave --nsp out.")
    if recipe != "bert" and init_from is not None:
        raise ValueError(f"recipe={recipe!r} (--recipe {recipe}) builds a new {spec['family']} model of a size "
                         f"(--model); init_from (--init-from) continues a checkpoint as it is. Pass one.")
    if generator_size is not None and objective != "electra":
        raise ValueError("generator_size (--generator-size) sizes ELECTRA's generator: it needs objective='electra' "
                         "(--objective electra).")
    if generator_size is not None and not 0 < generator_size <= 1:
        raise ValueError(f"generator_size (--generator-size) must lie in (0, 1], got {generator_size!r}.")
    _check_family_switch(family, objective, nsp, init_from)
    electra = objective == "electra"
    switch = family is not None
    family = family or ("electra" if electra else (spec["family"] if recipe != "bert" else None))
    nsp = nsp if nsp is not None else recipe == "bert" and not electra and not switch
    return PretrainingSetup(objective, recipe, bool(nsp), family, spec.get("dynamic_masking", False),
                            spec.get("short_seq_prob"), generator_size, switch)


def _check_family_switch(family: str | None, objective: str, nsp: bool | None, init_from) -> None:
    """``family`` (--family) names a preset family and builds a new masked-LM model: ``ValueError`` otherwise."""
    if family is None:
        return
    if family not in FAMILY_PRESETS:
        raise ValueError(f"family={family!r} (--family) is not a family bertkit pretrains; choose one of "
                         f"{', '.join(FAMILY_PRESETS)}.")
    if objective == "electra":
        raise ValueError(f"family={family!r} (--family) and objective='electra' (--objective electra) are "
                         "alternatives: ELECTRA trains its own discriminator and generator; pass one.")
    if nsp:
        raise ValueError(f"next_sentence_prediction=True (--nsp) does not combine with family={family!r} "
                         "(--family): it pretrains with masked-LM alone; leave --nsp out.")
    if init_from is not None:
        raise ValueError(f"family={family!r} (--family) builds a new model of a size (--model); init_from "
                         "(--init-from) continues a checkpoint of its own family. Pass one.")


def _load_init(source, model, seed: int, how: PretrainingSetup, model_overrides) -> LoadedSource:
    from bertkit.tasks.sources import source_config

    if how.electra:
        return continue_electra_from(source, model=model, seed=seed, generator_size=how.generator_size,
                                     model_overrides=model_overrides)
    discriminator, generator = electra_checkpoints(source)
    if generator is not None or source_config(discriminator).family == "electra":
        raise ValueError(f"{os.fspath(source)} (--init-from) is an ELECTRA checkpoint: continue it with its own "
                         "objective, objective='electra' (--objective electra).")
    return continue_from(source, model=model, seed=seed, nsp=how.nsp, model_overrides=model_overrides)


class Pretraining(Recipe):
    """Pretraining as :func:`pretrain` runs it (``how``: the objective and recipe, :func:`pretraining_setup`):
    the model built from ``model`` (a size or config) or continued from ``init``, the data's collator masking as
    ``masking`` says, the held-out set (``eval_dataset``) scored by the Trainer during training and by
    :func:`evaluate_pretraining` at the end (and before, for a continued checkpoint), ``evaluation.json``."""

    model_dir = MODEL_DIR
    results_file = EVALUATION_FILE
    bookkeeping_by_epoch = False  # logs and checkpoints as the config says (the size's recipe)
    evaluation_data = "a held-out set (eval_data_dir=, --eval-data DIR; --text holds one out itself)"

    def __init__(self, how: PretrainingSetup, dataset: PretrainingData | None,
                 eval_dataset: PretrainingDataset | None, *, model, init: LoadedSource | None, model_overrides,
                 masking):
        self.how, self.dataset, self.eval_dataset, self.init = how, dataset, eval_dataset, init
        self.model_source, self.model_overrides, self.masking = model, model_overrides, masking
        self.before: dict[str, Any] | None = None

    def start(self, run: RunDirectory, config: TrainingConfig) -> None:
        _check_init_source(run, self.init)
        self.prepare_data(run)
        self.seed = config.seed
        self.tokenizer = self.dataset.load_tokenizer()
        check_enough_data(self.dataset, config)
        self.config, self.generator, self.generator_size = self._configs()
        if not self.dataset.static_masking and self.how.electra:  # ELECTRA's split of the masked tokens,
            self.masking = {**ELECTRA_MASKING, **(self.masking or {})}  # unless asked otherwise
        if self.init is None:
            torch.manual_seed(config.seed)  # the initial weights are a function of the seed
            if self.how.electra:
                self.model = ELECTRAForPretrainingRTD(self.config, self.generator)
            else:
                self.model = (BERTForPreTraining if self.config.family_spec.next_sentence
                              else BERTForMaskedLM)(self.config)
        else:  # on resume the Trainer loads the checkpoint's weights over these
            self.model = self.init.model

    def prepare_data(self, run: RunDirectory) -> None:
        """Build the data that lives in the run directory (none: the data directories were given)."""

    def steps_per_epoch(self, config: TrainingConfig) -> int:
        return len(self.dataset) // config.batch_size  # check_enough_data made it one at least

    def _configs(self) -> tuple[BERTConfig, BERTConfig | None, float | None]:
        """The model's config, an ELECTRA run's generator config and its width ratio."""
        how, init = self.how, self.init
        if init is None:
            config = model_config(self.model_source or "tiny", self.tokenizer, self.dataset.max_seq_length,
                                  family=how.family, **(self.model_overrides or {}))
        else:
            config = _model_config(init.model)
        if how.nsp and not config.family_spec.next_sentence:
            raise ValueError(f"next_sentence_prediction=True (--nsp, or the size's recipe) but the model is a "
                             f"{config.family!r}, a family without a next-sentence head; pass --no-nsp "
                             "(next_sentence_prediction=False).")
        if not how.electra:
            return config, None, how.generator_size
        if init is not None:
            return config, init.model.generator.config, how.generator_size
        ratio = how.generator_size or default_generator_size(config.hidden_size)
        return config, generator_config(config, ratio), ratio

    def checks(self) -> dict[str, Any]:
        eval_dataset = self.eval_dataset
        return {"task": self.how.task(self.generator, self.generator_size), "model": self.config.to_dict(),
                "tokenizer": tokenizer_fingerprint(self.tokenizer),
                "data": {"train": data_fingerprint(self.dataset),
                         "eval": data_fingerprint(eval_dataset) if eval_dataset is not None else None,
                         "masking": self.masking or {}, "next_sentence_prediction": self.how.nsp}}

    def training_data(self, config: TrainingConfig) -> TrainingData:
        # a model with one token type (RoBERTa) reads every token as segment 0
        layout = {"nsp": self.how.nsp} | ({} if self.config.type_vocab_size > 1 else {"token_types": False})
        masking = self.masking or {}
        collator = self.dataset.collator(generator=torch.Generator().manual_seed(config.seed), **layout, **masking)
        eval_collate = None
        if self.eval_dataset is not None:  # ELECTRA is scored on held-out batches masked as it trains; MLM as BERT
            eval_masking = {**layout, **masking} if self.how.electra else layout
            eval_collate = _seeded_collator(self.eval_dataset, config.seed, **eval_masking)
        return TrainingData(self.dataset, collate_fn=collator, sampler_factory=_sampler_factory(self.dataset),
                            eval_dataset=self.eval_dataset, eval_collate_fn=eval_collate)

    def begin(self, trainer, run: RunDirectory) -> None:
        self.device = trainer.device
        if self.init is not None and self.eval_dataset is not None and trainer.ctx.is_main:
            self.before = _evaluate_before(run, self.held_out_scores)

    def held_out_scores(self) -> dict[str, Any]:
        """:func:`evaluate_pretraining` of the model on the held-out set (ELECTRA: its generator's, and the pair's
        replaced-token detection)."""
        return _evaluate(self.model, self.eval_dataset, self.dataset, self.device, self.seed, self.how.nsp,
                         self.masking if self.how.electra else None)

    def moved(self, staging: Path, run: RunDirectory) -> None:  # data built inside the run (--text) moved with it
        for data in [*data_parts(self.dataset), self.eval_dataset]:
            if data is not None and data.data_dir.absolute().is_relative_to(staging):
                data.data_dir = run.path / data.data_dir.absolute().relative_to(staging)

    def save(self, output: Path) -> None:
        if self.how.electra:  # the discriminator is the model to fine-tune; its generator beside it
            self.model.discriminator.save_pretrained(output / MODEL_DIR)
            self.model.generator.save_pretrained(output / GENERATOR_DIR)
            self.tokenizer.save_pretrained(output / GENERATOR_DIR)
        else:
            self.model.save_pretrained(output / MODEL_DIR)
        self.tokenizer.save_pretrained(output / MODEL_DIR)

    def load(self, output: Path) -> None:
        if self.how.electra:
            self.model.discriminator.from_pretrained(output / MODEL_DIR, warn=False)
            self.model.generator.from_pretrained(output / GENERATOR_DIR, warn=False)
        else:
            self.model.from_pretrained(output / MODEL_DIR, warn=False)

    def finish(self, trainer, result: RunResult) -> dict[str, Any] | None:
        if self.how.electra:
            result.generator_dir = result.output_dir / GENERATOR_DIR
        if self.eval_dataset is None:
            return None
        evaluation = self.held_out_scores()
        if self.before is not None:  # the flat keys stay "after", for readers of from-scratch runs
            evaluation = {**evaluation, "before": self.before, "after": evaluation}
        return evaluation


class PretrainingFromText(Pretraining):
    """:class:`Pretraining` on data built from text inside the run directory (:func:`pretrain_from_text`):
    ``files`` and the data ``settings`` checked, the data built once (a resumed run reuses it)."""

    def __init__(self, how: PretrainingSetup, files: list[str], settings: dict[str, Any], *, progress: bool,
                 workers: int, **options: Any):
        super().__init__(how, None, None, **options)
        self.files, self.settings, self.progress, self.workers = files, settings, progress, workers

    def prepare_data(self, run: RunDirectory) -> None:
        run.check("text", {"files": file_fingerprint(self.files), "settings": self.settings})
        data_root = run.path / "data"
        train_dir, heldout_dir = data_root / "train", data_root / "heldout"
        if not (run.resumed and (train_dir / INDEX_NAME).exists()):
            if not run.resumed:  # data an attempt that never trained left here: a fresh run builds its own
                shutil.rmtree(data_root, ignore_errors=True)
            build_text_data(self.files, data_root, self.settings, self.progress,
                            tokenizer=self.init.tokenizer if self.init else None, workers=self.workers)
        self.dataset = PretrainingDataset(train_dir)
        self.eval_dataset = PretrainingDataset(heldout_dir) if (heldout_dir / INDEX_NAME).exists() else None


def check_enough_data(dataset: PretrainingData, training: TrainingConfig) -> None:
    """``ValueError`` saying how much more text is needed when ``dataset`` cannot fill one optimizer step."""
    have, need = len(dataset), training.batch_size
    if have >= need:
        return
    tokens = int(dataset.index.get("num_tokens", 0))
    per_instance = tokens / have if have else dataset.max_seq_length
    missing_kb = (need - have) * per_instance * 4.5 / 1024  # ~4.5 bytes of English text per word piece
    raise ValueError(f"the training text is too small: it makes {have} instance(s) of up to {dataset.max_seq_length} "
                     f"tokens ({tokens} tokens in all), and one step needs batch_size={need}. Give about "
                     f"{max(1, round(missing_kb))} KB more text, or lower --batch-size / --max-seq-length.")


def _sampler_factory(dataset: PretrainingData):
    """Weighted directories are drawn by :class:`MixtureSampler`; otherwise the Trainer's default
    :class:`~bertkit.training.SeededSampler` (None), as for one directory."""
    weights = getattr(dataset, "weights", None)
    if weights is None:
        return None
    return functools.partial(MixtureSampler, sizes=dataset.sizes, weights=weights)


def data_fingerprint(dataset: PretrainingData) -> dict[str, Any]:
    """What makes two data directories the same: their index (counts, settings, shards). For several, each
    directory's in order and the normalised weights (None: concatenated), so another mix is another run."""
    if isinstance(dataset, MixedPretrainingDataset):
        weights = None if dataset.weights is None else [float(f"{w:.12g}") for w in dataset.weights]
        return {"directories": [data_fingerprint(part) for part in dataset.datasets], "weights": weights}
    index = {k: v for k, v in dataset.index.items() if k != "tokenizer"}
    return {"num_instances": len(dataset),
            "index_sha256": hashlib.sha256(json.dumps(index, sort_keys=True).encode()).hexdigest()}


def pretrain_from_text(files: list[str | os.PathLike] | str | os.PathLike, output_dir: str | os.PathLike, *,
                       text: TextOptions | None = None, model: str | os.PathLike | BERTConfig | None = None,
                       init_from: str | os.PathLike | None = None, training: TrainingConfig | None = None,
                       next_sentence_prediction: bool | None = None, model_overrides: dict[str, Any] | None = None,
                       masking: dict[str, Any] | None = None, objective: str = "mlm", recipe: str = "bert",
                       generator_size: float | None = None, family: str | None = None, progress: bool = True,
                       resume: bool = False,
                       overwrite: bool = False, apply_changes: bool = False, callbacks=None,
                       **text_options: Any) -> RunResult:
    """Learn a vocabulary, build train / held-out data (:mod:`bertkit.tasks.text_data`), pretrain.

    ``files``: files, directories or glob patterns of text, ``.jsonl``, ``.parquet`` or Arrow (see
    :func:`bertkit.data.partitions.expand_inputs`). ``text``: how the text becomes data
    (:class:`~bertkit.tasks.text_data.TextOptions`; its fields are also accepted as keyword arguments, e.g.
    ``vocab_size=1500, max_seq_length=64``, applied over it). A corpus over 64 MB is never held whole: it is read
    in partitions on ``workers`` processes, and the vocabulary is learnt from a sample of
    ``tokenizer_sample_bytes`` spread over it.

    From scratch (``model``: a size, default ``tiny``, or a config) the vocabulary is learnt from the
    training part (``vocab_size``, default 8000; ``do_lower_case``, default True). With ``init_from``
    (a checkpoint, see :func:`continue_from`) no vocabulary is learnt: the text is tokenized with
    the checkpoint's own tokenizer, so ``vocab_size`` / ``do_lower_case`` are refused (``ValueError``),
    as is a ``max_seq_length`` beyond the checkpoint's position embeddings; the held-out set is
    scored before training too.

    Everything lands in ``output_dir`` (owned as :func:`pretrain` says): ``data/`` holds the
    split text, the tokenizer and both data directories. With ``resume`` they are reused as
    they are — never rebuilt — after checking that ``files`` and the data settings are the
    ones the run was built from. ``training.seed`` also seeds the data creation.
    ``objective``, ``recipe``, ``generator_size``, ``family``, ``next_sentence_prediction``, ``model_overrides``,
    ``masking`` and the run's arguments are :func:`pretrain`'s; with ``recipe="roberta"`` every sequence is filled to
    ``max_seq_length`` with contiguous text of one document.
    """
    if launched_by_torchrun():
        raise ValueError("pretraining from --text under torchrun would build the data once per process; build it "
                         "first (bertkit data create ...), then run torchrun ... pretrain --data DIR.")
    text = (text or TextOptions()).with_options(text_options, "pretrain_from_text")
    files = [f for f in expand_inputs(files) if isinstance(f, str)]  # texts and Documents are for data create
    training = training or TrainingConfig(max_steps=1000, learning_rate=1e-3, warmup_ratio=0.1)
    how = pretraining_setup(objective, recipe, next_sentence_prediction, init_from, generator_size, family)
    settings = dict(max_seq_length=text.max_seq_length, heldout_every=text.heldout_every,
                    dupe_factor=text.dupe_factor, whole_word=text.whole_word, masked_lm_prob=text.masked_lm_prob,
                    encoding=text.encoding, format=text.format, seed=training.seed, next_sentence_prediction=how.nsp)
    if how.short_seq_prob is not None:  # recorded only off Google's default, so older runs still resume
        settings["short_seq_prob"] = how.short_seq_prob
    # recorded only when not the default, so runs made before these settings existed still resume
    settings |= {name: getattr(text, name) for name in ("text_field", "tokenizer_sample_bytes")
                 if getattr(text, name) != getattr(TextOptions, name)}
    init = None
    if init_from is None:
        settings |= dict(vocab_size=8000 if text.vocab_size is None else text.vocab_size,
                         do_lower_case=True if text.do_lower_case is None else text.do_lower_case)
    else:
        given = [f"{name}={getattr(text, name)!r}" for name in ("vocab_size", "do_lower_case")
                 if getattr(text, name) is not None]
        if given:
            raise ValueError(f"{', '.join(given)} (--vocab-size / --cased) would train a new tokenizer, but with "
                             f"init_from (--init-from) the text is tokenized with {os.fspath(init_from)}'s own "
                             "tokenizer; leave them out.")
        init = _load_init(init_from, model, training.seed, how, model_overrides)
        _check_positions(init, text.max_seq_length, "max_seq_length (--max-seq-length) is",
                         "pass --max-seq-length")
    recipe = PretrainingFromText(how, files, settings, progress=progress, workers=text.workers, model=model,
                                 init=init, model_overrides=model_overrides, masking=masking)
    return run_recipe(recipe, training, output_dir=output_dir, resume=resume, overwrite=overwrite,
                      apply_changes=apply_changes, callbacks=callbacks)
