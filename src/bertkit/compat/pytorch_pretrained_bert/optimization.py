"""pytorch_pretrained_bert 0.6.2's ``BertAdam``, ``OpenAIAdam`` and their learning-rate schedules.

Both optimizers are 0.6.2's, step for step, and share everything but the last part of the
update (:class:`_ScheduledAdam`); ``OpenAIAdam``'s differences are in its docstring.
``BertAdam``'s update rule: no bias correction; each parameter's gradient
clipped to ``max_grad_norm`` on its own (in place, as ``clip_grad_norm_(p, ...)`` does);
decoupled weight decay added to the update; the learning rate multiplied by the
schedule's value at the parameter's step count *before* the update (so with warmup the
first step has learning rate 0 and moves nothing). Warnings (``t_total < 0``, training
beyond ``t_total``) are 0.6.2's. The arithmetic runs as ``torch._foreach_*`` ops over all
parameters of a group at once; the optimizer states have 0.6.2's keys.
"""

from __future__ import annotations

import abc
import logging
import math
from collections.abc import Callable, Iterable

import torch
from torch.optim import Optimizer
from torch.optim.optimizer import required

logger = logging.getLogger(__name__)


class _LRSchedule(abc.ABC):
    """Parent of all LRSchedules here."""

    warn_t_total = False  # set for schedules where progressing beyond t_total steps doesn't make sense

    def __init__(self, warmup: float = 0.002, t_total: float = -1, **kw):
        """
        :param warmup:  what fraction of t_total steps will be used for linear warmup
        :param t_total: how many training steps (updates) are planned
        """
        super().__init__(**kw)
        if t_total < 0:
            logger.warning(f"t_total value of {t_total} results in schedule not being applied")
        if not 0.0 <= warmup < 1.0 and not warmup == -1:
            raise ValueError(f"Invalid warmup: {warmup} - should be in [0.0, 1.0[ or -1")
        warmup = max(warmup, 0.)
        self.warmup, self.t_total = float(warmup), float(t_total)
        self.warned_for_t_total_at_progress = -1

    def get_lr(self, step: int, nowarn: bool = False) -> float:
        """
        :param step:    which of t_total steps we're on
        :param nowarn:  set to True to suppress warning regarding training beyond specified 't_total' steps
        :return:        learning rate multiplier for current update
        """
        if self.t_total < 0:
            return 1.
        progress = float(step) / self.t_total
        ret = self.get_lr_(progress)
        if not nowarn and self.warn_t_total and progress > 1. and progress > self.warned_for_t_total_at_progress:
            logger.warning(
                f"Training beyond specified 't_total'. Learning rate multiplier set to {ret}. "
                f"Please set 't_total' of {self.__class__.__name__} correctly.")
            self.warned_for_t_total_at_progress = progress
        return ret

    @abc.abstractmethod
    def get_lr_(self, progress: float) -> float:
        """
        :param progress:    value between 0 and 1 (unless going beyond t_total steps) specifying training progress
        :return:            learning rate multiplier for current update
        """
        return 1.


class ConstantLR(_LRSchedule):
    """No schedule: the learning-rate multiplier is 1 at every step (``BertAdam(schedule=None)``)."""

    def get_lr_(self, progress):
        return 1.


class WarmupCosineSchedule(_LRSchedule):
    """Linear warmup from 0 to 1 over ``warmup`` of the steps, then a cosine from 1 to 0
    (``cycles`` = 0.5: half a period over the remaining steps)."""

    warn_t_total = True

    def __init__(self, warmup: float = 0.002, t_total: float = -1, cycles: float = .5, **kw):
        super().__init__(warmup=warmup, t_total=t_total, **kw)
        self.cycles = cycles

    def get_lr_(self, progress):
        if progress < self.warmup:
            return progress / self.warmup
        progress = (progress - self.warmup) / (1 - self.warmup)  # progress after warmup
        return 0.5 * (1. + math.cos(math.pi * self.cycles * 2 * progress))


class WarmupCosineWithHardRestartsSchedule(WarmupCosineSchedule):
    """Linear warmup, then ``cycles`` cosine decays from 1 to 0 with hard restarts."""

    def __init__(self, warmup: float = 0.002, t_total: float = -1, cycles: float = 1., **kw):
        super().__init__(warmup=warmup, t_total=t_total, cycles=cycles, **kw)
        assert cycles >= 1.

    def get_lr_(self, progress):
        if progress < self.warmup:
            return progress / self.warmup
        progress = (progress - self.warmup) / (1 - self.warmup)  # progress after warmup
        return 0.5 * (1. + math.cos(math.pi * ((self.cycles * progress) % 1)))


class WarmupCosineWithWarmupRestartsSchedule(WarmupCosineWithHardRestartsSchedule):
    """``cycles`` equal parts, each a linear warmup over ``warmup`` of it followed by a cosine decay."""

    def __init__(self, warmup: float = 0.002, t_total: float = -1, cycles: float = 1., **kw):
        assert warmup * cycles < 1.
        warmup = warmup * cycles if warmup >= 0 else warmup
        super().__init__(warmup=warmup, t_total=t_total, cycles=cycles, **kw)

    def get_lr_(self, progress):
        progress = progress * self.cycles % 1.
        if progress < self.warmup:
            return progress / self.warmup
        progress = (progress - self.warmup) / (1 - self.warmup)  # progress after warmup
        return 0.5 * (1. + math.cos(math.pi * progress))


class WarmupConstantSchedule(_LRSchedule):
    """Linear warmup from 0 to 1 over ``warmup`` of the steps, then 1."""

    def get_lr_(self, progress):
        if progress < self.warmup:
            return progress / self.warmup
        return 1.


class WarmupLinearSchedule(_LRSchedule):
    """Linear warmup from 0 to 1 over ``warmup`` of the steps, then linear decay to 0 at ``t_total``."""

    warn_t_total = True

    def get_lr_(self, progress):
        if progress < self.warmup:
            return progress / self.warmup
        return max((progress - 1.) / (self.warmup - 1.), 0.)


#: ``BertAdam(schedule=NAME)`` -> its learning-rate schedule class (None and none: constant).
SCHEDULES = {
    None: ConstantLR,
    "none": ConstantLR,
    "warmup_cosine": WarmupCosineSchedule,
    "warmup_constant": WarmupConstantSchedule,
    "warmup_linear": WarmupLinearSchedule,
}


class _ScheduledAdam(Optimizer):
    """What 0.6.2's ``BertAdam`` and ``OpenAIAdam`` share: argument checks, the schedule object, ``get_lr``,
    per-parameter gradient clipping and the moment updates. Subclasses name the moments
    (``_moments``) and apply the update (``_update``)."""

    _moments: tuple[str, str]

    def __init__(self, params: Iterable, lr: float, schedule: str | _LRSchedule | None, warmup: float,
                 t_total: float, b1: float, b2: float, e: float, weight_decay: float, max_grad_norm: float,
                 **extra_defaults):
        if lr is not required and lr < 0.0:
            raise ValueError(f"Invalid learning rate: {lr} - should be >= 0.0")
        if not isinstance(schedule, _LRSchedule) and schedule not in SCHEDULES:
            raise ValueError(f"Invalid schedule parameter: {schedule}")
        if not 0.0 <= b1 < 1.0:
            raise ValueError(f"Invalid b1 parameter: {b1} - should be in [0.0, 1.0[")
        if not 0.0 <= b2 < 1.0:
            raise ValueError(f"Invalid b2 parameter: {b2} - should be in [0.0, 1.0[")
        if not e >= 0.0:
            raise ValueError(f"Invalid epsilon value: {e} - should be >= 0.0")
        if not isinstance(schedule, _LRSchedule):
            schedule = SCHEDULES[schedule](warmup=warmup, t_total=t_total)
        elif warmup != -1 or t_total != -1:
            logger.warning("warmup and t_total on the optimizer are ineffective when _LRSchedule object is "
                           "provided as schedule. Please specify custom warmup and t_total in _LRSchedule object.")
        defaults = dict(lr=lr, schedule=schedule, b1=b1, b2=b2, e=e, weight_decay=weight_decay, **extra_defaults,
                        max_grad_norm=max_grad_norm)
        super().__init__(params, defaults)

    def get_lr(self) -> list[float]:
        """The learning rate times the schedule at every parameter's step count ([0] before the first step)."""
        lr = []
        for group in self.param_groups:
            for p in group["params"]:
                state = self.state[p]
                if len(state) == 0:
                    return [0]
                lr.append(group["lr"] * group["schedule"].get_lr(state["step"]))
        return lr

    @torch.no_grad()
    def step(self, closure: Callable[[], torch.Tensor] | None = None):
        """Performs a single optimization step (``closure`` reevaluates the model and returns the loss)."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        first, second = self._moments
        for group in self.param_groups:
            params = [p for p in group["params"] if p.grad is not None]
            if not params:
                continue
            grads = [p.grad for p in params]
            if any(g.is_sparse for g in grads):
                raise RuntimeError("Adam does not support sparse gradients, please consider SparseAdam instead")
            states = [self.state[p] for p in params]
            for p, state in zip(params, states):
                if len(state) == 0:
                    state["step"] = 0
                    state[first] = torch.zeros_like(p)  # exponential moving average of gradients
                    state[second] = torch.zeros_like(p)  # ... and of squared gradients
            exp_avg = [s[first] for s in states]
            exp_avg_sq = [s[second] for s in states]
            if group["max_grad_norm"] > 0:
                _clip_each_(grads, group["max_grad_norm"])
            torch._foreach_mul_(exp_avg, group["b1"])
            torch._foreach_add_(exp_avg, grads, alpha=1 - group["b1"])
            torch._foreach_mul_(exp_avg_sq, group["b2"])
            torch._foreach_addcmul_(exp_avg_sq, grads, grads, value=1 - group["b2"])
            denom = torch._foreach_sqrt(exp_avg_sq)
            torch._foreach_add_(denom, group["e"])
            self._update(group, params, states, exp_avg, denom)
        return loss

    def _update(self, group: dict, params: list[torch.Tensor], states: list[dict], exp_avg: list[torch.Tensor],
                denom: list[torch.Tensor]) -> None:
        """Move ``params`` given the new first moments and ``sqrt(second moments) + e``; advance the step counts."""
        raise NotImplementedError


class BertAdam(_ScheduledAdam):
    """Implements BERT version of Adam algorithm with weight decay fix.

    Params:
        lr: learning rate
        warmup: portion of t_total for the warmup, -1  means no warmup. Default: -1
        t_total: total number of training steps for the learning
            rate schedule, -1  means constant learning rate of 1. (no warmup regardless of warmup setting).
        schedule: ``'warmup_linear'`` (default), ``'warmup_constant'``, ``'warmup_cosine'``, ``'none'``,
            None or an ``_LRSchedule`` object.
        b1, b2: Adam's betas. Default: 0.9, 0.999
        e: Adam's epsilon. Default: 1e-6
        weight_decay: decoupled weight decay. Default: 0.01
        max_grad_norm: per-parameter gradient clipping norm (-1 means no clipping). Default: 1.0

    The update (no bias correction; the schedule read at the step count before the update):
    ``p -= lr * schedule(step) * (m / (sqrt(v) + e) + weight_decay * p)``. State: ``step``,
    ``next_m``, ``next_v``.
    """

    _moments = ("next_m", "next_v")

    def __init__(self, params: Iterable, lr: float = required, warmup: float = -1, t_total: float = -1,
                 schedule: str | _LRSchedule | None = "warmup_linear", b1: float = 0.9, b2: float = 0.999,
                 e: float = 1e-6, weight_decay: float = 0.01, max_grad_norm: float = 1.0, **kwargs):
        super().__init__(params, lr, schedule, warmup, t_total, b1, b2, e, weight_decay, max_grad_norm)

    def _update(self, group, params, states, exp_avg, denom) -> None:
        update = torch._foreach_div(exp_avg, denom)
        # decoupled weight decay: added to the update, never to the moments
        if group["weight_decay"] > 0.0:
            torch._foreach_add_(update, params, alpha=group["weight_decay"])
        # each parameter's own step count, as 0.6.2 keeps one per parameter
        lrs = [group["lr"] * group["schedule"].get_lr(state["step"]) for state in states]
        torch._foreach_mul_(update, lrs)
        torch._foreach_sub_(params, update)
        for state in states:
            state["step"] += 1


class OpenAIAdam(_ScheduledAdam):
    """Implements Open AI version of Adam algorithm with weight decay fix (0.6.2's, for BERT too).

    Params as :class:`BertAdam`'s, with other defaults (``e=1e-8``, ``weight_decay=0``,
    ``max_grad_norm=-1``) and ``vector_l2``: decay vectors (biases, LayerNorms) too.

    The update, with ``t`` the step count after this step and ``lr_t = lr * schedule(t)``:
    ``p -= lr_t * sqrt(1 - b2**t) / (1 - b1**t) * m / (sqrt(v) + e)`` (Adam's bias correction),
    then, for matrices (or every parameter with ``vector_l2``), ``p -= lr_t * weight_decay * p``.
    State: ``step``, ``exp_avg``, ``exp_avg_sq``.
    """

    _moments = ("exp_avg", "exp_avg_sq")

    def __init__(self, params: Iterable, lr: float = required, schedule: str | _LRSchedule | None = "warmup_linear",
                 warmup: float = -1, t_total: float = -1, b1: float = 0.9, b2: float = 0.999, e: float = 1e-8,
                 weight_decay: float = 0, vector_l2: bool = False, max_grad_norm: float = -1, **kwargs):
        super().__init__(params, lr, schedule, warmup, t_total, b1, b2, e, weight_decay, max_grad_norm,
                         vector_l2=vector_l2)

    def _update(self, group, params, states, exp_avg, denom) -> None:
        b1, b2 = group["b1"], group["b2"]
        lrs, step_sizes = [], []
        for state in states:
            state["step"] += 1
            lr = group["lr"] * group["schedule"].get_lr(state["step"])
            lrs.append(lr)
            step_sizes.append(-lr * math.sqrt(1 - b2 ** state["step"]) / (1 - b1 ** state["step"]))
        torch._foreach_addcdiv_(params, exp_avg, denom, step_sizes)
        if group["weight_decay"] > 0:
            for p, lr in zip(params, lrs):
                if p.dim() > 1 or group["vector_l2"]:
                    p.add_(p, alpha=-lr * group["weight_decay"])


def _clip_each_(grads: list[torch.Tensor], max_norm: float) -> None:
    """``clip_grad_norm_(p, max_norm)`` for each gradient on its own, in place, in a few fused ops."""
    norms = torch._foreach_norm(grads)
    if len({n.device for n in norms}) == 1:
        coefs = (max_norm / (torch.stack(norms) + 1e-6)).clamp(max=1.0).unbind()
    else:
        coefs = [(max_norm / (n + 1e-6)).clamp(max=1.0) for n in norms]
    torch._foreach_mul_(grads, coefs)


__all__ = ["SCHEDULES", "BertAdam", "ConstantLR", "OpenAIAdam", "WarmupConstantSchedule", "WarmupCosineSchedule",
           "WarmupCosineWithHardRestartsSchedule", "WarmupCosineWithWarmupRestartsSchedule",
           "WarmupLinearSchedule"]
