"""Parity of a bertkit family with HF transformers' classes of that family: the helpers the family tests share.

A :class:`FamilySetup` says how to build both sides' configs at the same tiny, odd sizes; a :class:`Case` is one
head (the bertkit class, the HF class, its outputs and labels). :func:`check_hf_checkpoint` writes random HF weights
with HF's ``save_pretrained`` and reads them with bertkit's ``from_pretrained``; :func:`check_our_checkpoint` goes
the other way (and back). Outputs, losses and gradients must agree at every real position of a padded batch (full,
right-padded and left-padded rows).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
import transformers

from bertkit.config import BERTConfig
from bertkit.modeling import fast, unpad
from bertkit.weights.tables import bertkit_to_hf_family, hf_names_key
from conftest import randomize_

TOL = dict(atol=2e-5, rtol=2e-5)
IMPLEMENTATIONS = ("eager", "sdpa")
BATCH, LENGTH, CHOICES = 3, 11, 2


@dataclass(frozen=True)
class FamilySetup:
    """One family's test sizes: ``ours`` are BERTConfig fields, ``hf`` the HF config class's keyword arguments."""

    name: str
    hf_config_class: type
    ours: dict
    hf: dict
    vocab_size: int = 99
    pad: int = 0
    type_vocab_size: int = 0  # 0: the family has no token types
    length: int = LENGTH  # tokens per row of the padded batches
    right: int = 4  # right padding of the right-padded rows
    left: int = 5  # left padding of the left-padded rows
    qa_spans: tuple[tuple[int, ...], tuple[int, ...]] = ((1, 2, 6), (4, 5, 8))  # (starts, ends) at real tokens
    hf_impl: str | None = None  # HF's attention implementation whatever ours is (None: the same as ours)
    grads_include: tuple[str, ...] = ()  # name endings some HF gradient must have (a parameter the batch must reach)
    # HF's gradients under its checkpoints' names, where HF's modules differ from what it writes (GTE, NomicBERT,
    # Jina: q/k/v fused on disk): transformers' own save-time conversion applied to the gradients
    hf_checkpoint_layout: bool = False

    def our_config(self, case: Case, impl: str, **extra) -> BERTConfig:
        return BERTConfig(family=self.name, **{**self.ours, **case.config, **extra}, attn_implementation=impl)

    def hf_config(self, case: Case, impl: str, **extra):
        return self.hf_config_class(**{**self.hf, **case.hf_config, **extra},
                                    attn_implementation=self.hf_impl or impl)


@dataclass(frozen=True)
class Case:
    id: str
    ours: type
    hf_class: str
    config: dict = field(default_factory=dict)  # BERTConfig fields of this head
    hf_config: dict = field(default_factory=dict)  # the same for HF's config (its names)
    outputs: tuple[str, ...] = ("logits",)
    token_level: tuple[bool, ...] = (False,)
    labels: Callable | None = None  # (family, inputs) -> HF label kwargs
    choices: int = 0


def padded_batch(vocab_size: int, pad: int, rows: int, length: int, *, right: int, left: int,
                 left_padded: bool = True, seed: int = 1, lowest_id: int = 3) -> tuple[torch.Tensor, torch.Tensor]:
    """``(input_ids, attention_mask)`` ``[rows, length]``: rows alternately full, right-padded by ``right`` tokens and
    left-padded by ``left`` (``left_padded=False``: right-padded by ``left + 5`` instead), padding ids ``pad``,
    real ids drawn from ``[lowest_id, vocab_size)`` (above the special ids)."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(lowest_id, vocab_size, (rows, length), generator=g)
    mask = torch.ones(rows, length, dtype=torch.long)
    for r in range(rows):
        if r % 3 == 1:
            mask[r, length - right:] = 0
        elif r % 3 == 2 and left_padded:
            mask[r, :left] = 0
        elif r % 3 == 2:
            mask[r, length - left - 5:] = 0
    ids[mask == 0] = pad
    return ids, mask


def padded_ids(family: FamilySetup, rows: int = BATCH, seed: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`padded_batch` of ``family``'s sizes: ``family.length`` tokens (default ``LENGTH``), right padding
    ``family.right`` (4), left padding ``family.left`` (5)."""
    return padded_batch(family.vocab_size, family.pad, rows, family.length, right=family.right, left=family.left,
                        seed=seed)


def inputs_for(family: FamilySetup, choices: int = 0) -> dict[str, torch.Tensor]:
    rows = BATCH * choices if choices else BATCH
    ids, mask = padded_ids(family, rows)
    inputs = dict(input_ids=ids, attention_mask=mask)
    if family.type_vocab_size:
        inputs["token_type_ids"] = torch.randint(0, family.type_vocab_size, ids.shape,
                                                 generator=torch.Generator().manual_seed(2))
    return {k: v.view(BATCH, choices, family.length) for k, v in inputs.items()} if choices else inputs


def token_labels(inputs, num_classes: int, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    mask = inputs["attention_mask"]
    labels = torch.randint(0, num_classes, mask.shape, generator=g)
    labels[(mask == 0) | (torch.rand(mask.shape, generator=g) < 0.3)] = -100
    return labels


def causal_labels(family: FamilySetup, inputs) -> torch.Tensor:
    """Token labels, also -100 where the previous position is padding (a prediction from padding means nothing)."""
    labels = token_labels(inputs, family.vocab_size)
    labels[:, 1:][inputs["attention_mask"][:, :-1] == 0] = -100
    return labels


def qa_labels(family: FamilySetup, inputs) -> dict[str, torch.Tensor]:
    start = torch.tensor(family.qa_spans[0])  # real tokens of each row (row 2 is left-padded)
    end = torch.tensor(family.qa_spans[1])
    start[1] = family.length + 7  # outside: clamped and ignored by both
    return dict(start_positions=start, end_positions=end)


def hf_from_pretrained(cls, directory, impl: str):
    model, info = cls.from_pretrained(directory, attn_implementation=impl, output_loading_info=True)
    assert not any(info[k] for k in ("missing_keys", "unexpected_keys", "mismatched_keys")), info
    assert model.config._attn_implementation == impl
    return model.eval()


def ours_and_hf_outputs(family: FamilySetup, case: Case, ours, hf, inputs=None):
    """``[(output name, ours, HF's)]``, token-level outputs at the real tokens only."""
    inputs = inputs_for(family, case.choices) if inputs is None else inputs
    mask = inputs["attention_mask"].bool()
    with torch.no_grad():
        got = ours(**inputs)
        ref = hf(**inputs)
    got = tuple(g for g in got if g is not None) if isinstance(got, tuple) else (got,)  # a backbone without pooler
    pairs = []
    for name, a, token_level in zip(case.outputs, got, case.token_level, strict=True):
        b = getattr(ref, name)
        if name == "pooler_output":  # the bare backbone pools position 0, a padding position in left-padded rows
            a, b = a[mask[:, 0]], b[mask[:, 0]]  # (where unpadded execution leaves 0, as at every padding position)
        pairs.append((name, a[mask] if token_level else a, b[mask] if token_level else b))
    return pairs


def assert_pairs_close(pairs, what: str) -> float:
    """Assert each pair within :data:`TOL`; returns the largest absolute difference."""
    worst = 0.0
    for name, a, b in pairs:
        assert a.shape == b.shape, f"{what} {name}: {tuple(a.shape)} vs HF {tuple(b.shape)}"
        torch.testing.assert_close(a, b, **TOL, msg=lambda m, n=name: f"{what} {n}: {m}")
        worst = max(worst, float((a - b).detach().abs().max()) if a.numel() else 0.0)
    return worst


def our_loss(model, labels: dict, inputs: dict) -> torch.Tensor:
    if "start_positions" in labels:
        return model.get_loss(labels["start_positions"], labels["end_positions"], **inputs)
    return model.get_loss(labels["labels"], **inputs)


def losses_and_gradients(family: FamilySetup, case: Case, ours, hf):
    """``(our loss, HF loss, [(HF param name, our grad, HF grad)])`` for the case's labels."""
    inputs = inputs_for(family, case.choices)
    labels = case.labels(family, inputs)
    ours.zero_grad()
    hf.zero_grad()
    loss = our_loss(ours, labels, inputs)
    loss.backward()
    ref = hf(**inputs, **labels).loss
    ref.backward()
    our_grads = bertkit_to_hf_family({n: p.grad for n, p in ours.named_parameters() if p.grad is not None},
                                     hf_names_key(ours.config))
    for name, p in ours.named_parameters(remove_duplicate=False):  # a tied weight under each of its names too: HF
        if p.grad is not None:  # may name it by the head (Jina's lm_head comes before its backbone)
            our_grads.setdefault(next(iter(bertkit_to_hf_family({name: None}, hf_names_key(ours.config)))), p.grad)
    hf_grads = {n: p.grad for n, p in hf.named_parameters() if p.grad is not None}
    for ending in family.grads_include:
        assert any(n.endswith(ending) for n in hf_grads), ending
    if family.hf_checkpoint_layout:
        from transformers.core_model_loading import revert_weight_conversion

        hf_grads = revert_weight_conversion(hf, hf_grads)
    assert hf_grads and set(hf_grads) <= set(our_grads), sorted(set(hf_grads) - set(our_grads))
    return loss, ref, [(n, our_grads[n], g) for n, g in hf_grads.items()]


#: ``"family/case/impl/direction" -> largest |ours - HF|`` over outputs, losses and gradients (printed by -s runs)
MAX_DIFFS: dict[str, float] = {}


def check_parity(family: FamilySetup, case: Case, ours, hf, what: str) -> None:
    worst = assert_pairs_close(ours_and_hf_outputs(family, case, ours, hf), what)
    if case.labels is not None:
        loss, ref, grads = losses_and_gradients(family, case, ours, hf)
        torch.testing.assert_close(loss, ref, **TOL)
        worst = max(worst, float((loss - ref).detach().abs()), assert_pairs_close(grads, f"{what} gradient"))
    MAX_DIFFS[what] = worst


def check_hf_checkpoint(family: FamilySetup, case: Case, impl: str, tmp_path, **hf_extra):
    """HF's random weights, saved by HF, loaded by bertkit with nothing adapted: the same outputs, losses and
    gradients. Returns ``(ours, hf)``."""
    hf = randomize_(getattr(transformers, case.hf_class)(family.hf_config(case, impl, **hf_extra)), seed=0,
                    std=0.1).eval()
    hf.save_pretrained(tmp_path)
    ours = case.ours.from_pretrained(tmp_path, attn_implementation=impl)
    report = ours.load_report
    assert report.initialized == report.dropped == report.resized == [], str(report)
    assert ours.config.family == family.name
    check_parity(family, case, ours, hf, f"{family.name}/{case.id}/{impl} (HF -> ours)")
    return ours, hf


def check_our_checkpoint(family: FamilySetup, case: Case, impl: str, tmp_path, **extra):
    """bertkit's random weights, saved by bertkit, loaded by HF's class (nothing missing or unexpected) and back
    in bertkit (the same config and tensors). Returns ``(ours, hf)``."""
    ours = randomize_(case.ours(family.our_config(case, impl, **extra)), seed=1, std=0.1).eval()
    ours.save_pretrained(tmp_path)
    written = json.loads((tmp_path / "config.json").read_text())
    assert written["model_type"] == family.name and written["architectures"] == [case.hf_class]
    hf = hf_from_pretrained(getattr(transformers, case.hf_class), tmp_path, family.hf_impl or impl)
    check_parity(family, case, ours, hf, f"{family.name}/{case.id}/{impl} (ours -> HF)")
    again = case.ours.from_pretrained(tmp_path, attn_implementation=impl)
    assert again.config == ours.config
    for (name, a), b in zip(ours.state_dict().items(), again.state_dict().values(), strict=True):
        assert torch.equal(a, b), name
    return ours, hf


def check_fast_and_plain_paths_agree(model, ids, mask, monkeypatch) -> None:
    """The fast path drops the padding (one unpadding plan of ``mask.sum()`` tokens; the plain path plans none)
    and equals the plain path: the outputs at every real position (all of them where not token-level) and every
    parameter's gradient."""
    plans = []
    real_plan = unpad.plan
    monkeypatch.setattr(unpad, "plan", lambda *a, **k: plans.append(real_plan(*a, **k)) or plans[-1])
    results = []
    for on in (True, False):
        model.zero_grad()
        with fast.fast_path(on):
            out = model(ids, mask)
        out = out[mask.bool()] if out.dim() == 3 else out
        (out * torch.linspace(-1, 1, out.shape[-1])).sum().backward()
        results.append((out.detach(), {n: p.grad.clone() for n, p in model.named_parameters()}))
    assert plans[0] is not None and plans[0].real == int(mask.sum()) and plans[1] is None
    (fast_out, fast_grads), (plain_out, plain_grads) = results
    torch.testing.assert_close(fast_out, plain_out, **TOL)
    for name, grad in fast_grads.items():
        torch.testing.assert_close(grad, plain_grads[name], **TOL, msg=name)
