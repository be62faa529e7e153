"""What the machine offers, asked one way everywhere (a leaf: torch only).

:func:`gpu` is lucid's ``"gpu"`` device name made concrete (CUDA, else Apple's MPS); :func:`native_bf16`
says whether a device computes bfloat16 natively, which decides bf16 autocast in training (``precision="auto"``),
``dtype="auto"`` at inference, the warning of ``optimize_for_inference(dtype=torch.bfloat16)`` on a CPU that
would emulate it, and the demo's precision (``BERTKIT_BF16=0`` makes it false everywhere, so a machine without
bf16 is reproduced, and tested, on one that has it); :func:`int8_saturates` says whether this CPU's int8
products can overflow, which decides the weights' bits of the int8 kernel.
"""

from __future__ import annotations

import functools
import os
import platform

import torch


def gpu(requested: str = 'device="gpu"') -> torch.device:
    """CUDA if there is one, else MPS; ValueError naming ``requested`` (how the caller spelled the ask) if neither."""
    if torch.cuda.is_available():
        return torch.device("cuda")
    mps = getattr(torch.backends, "mps", None)
    if mps is not None and mps.is_available():
        return torch.device("mps")
    raise ValueError(f"{requested} was requested but no GPU is available (no CUDA or MPS device); use 'cpu'.")


#: the environment variable that turns native bf16 off (``0``) for the whole process; unset or ``1``: as detected
BF16_ENV = "BERTKIT_BF16"
BF16_ENV_VALUES = {"0": False, "off": False, "false": False, "no": False, "1": True, "on": True, "true": True,
                   "yes": True, "": True}


def bf16_allowed() -> bool:
    """False when ``BERTKIT_BF16=0`` (or off/false/no) turns native bf16 off; read at each call (never cached), so
    a test or a benchmark can set it for a block. Any other value is a ValueError naming the variable."""
    value = os.environ.get(BF16_ENV, "").strip().lower()
    if value not in BF16_ENV_VALUES:
        raise ValueError(f"{BF16_ENV}={os.environ[BF16_ENV]!r} is not 0 or 1; set {BF16_ENV}=0 to run as on a "
                         f"machine without native bf16, or unset it.")
    return BF16_ENV_VALUES[value]


def native_bf16(device: torch.device | str = "cpu") -> bool:
    """Whether ``device`` computes bfloat16 natively: a CPU with AVX512-BF16, AMX or Arm BF16 (see
    :func:`cpu_bf16`), a CUDA GPU that supports it (Ampere and later); False for every device under
    ``BERTKIT_BF16=0`` (:func:`bf16_allowed`)."""
    device = torch.device(device)
    if not bf16_allowed():
        return False
    if device.type == "cuda":
        return torch.cuda.is_available() and torch.cuda.is_bf16_supported()
    return device.type == "cpu" and cpu_bf16()


#: CPU flags of native bf16 arithmetic: Intel AMX, AVX512-BF16, Arm's BF16 extension
BF16_FLAGS = ("amx_bf16", "avx512_bf16", "bf16")


@functools.cache
def cpu_bf16() -> bool:
    """True when the CPU has native bf16 arithmetic and a bf16 autocast matmul runs (asked once per process).

    ``torch.backends.cpu.get_cpu_capability()`` reports only the vector ISA (``"AVX512"`` with or without
    the BF16 extension), so the CPU flags are read where the OS exposes them, oneDNN is asked otherwise,
    and a tiny autocast matmul confirms it works.
    """
    flags = _cpu_flags()
    if flags is not None:
        supported = bool(flags & set(BF16_FLAGS))
    else:
        try:
            supported = bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
        except (AttributeError, RuntimeError):
            supported = False
    if not supported:
        return False
    try:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            probe = torch.ones(4, 4) @ torch.ones(4, 4)
        return probe.dtype == torch.bfloat16 and bool(probe[0, 0] == 4)
    except RuntimeError:
        return False


#: CPU flags of int8 dot products that fbgemm adds into 32 bits: AVX512-VNNI and AMX (AVX-VNNI alone is not
#: among them: fbgemm's kernels for 256-bit vectors are the AVX2 ones, so such a CPU is treated as saturating)
INT8_FLAGS = ("avx512_vnni", "amx_int8")


@functools.cache
def int8_saturates() -> bool:
    """True on an x86 CPU without VNNI or AMX (asked once per process): there fbgemm's u8 x s8 products
    (``vpmaddubsw``) add pairs of products into 16 bits, which saturate when the pair exceeds 32,767 (two
    255 x 127), so the int8 kernel keeps its weights to 7 bits (:func:`bertkit.modeling.quantization.seven_bit`)."""
    if platform.machine().lower() not in ("x86_64", "amd64"):
        return False
    flags = _cpu_flags()
    if flags is not None:
        return not flags & set(INT8_FLAGS)
    probe = getattr(torch.cpu, "_is_vnni_supported", None)
    return not (probe is not None and probe())


def _cpu_flags() -> set[str] | None:
    """CPU feature flags from /proc/cpuinfo (x86 "flags", Arm "Features"), or None where unreadable."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip() in ("flags", "Features"):
                    return set(value.split())
    except OSError:
        return None
    return None


def bf16_reason(device: torch.device | str = "cpu") -> str:
    """Why :func:`native_bf16` says what it says about ``device``, in a few words for a log line: ``"this CPU has
    avx512_bf16"``, ``"this CPU has no amx_bf16, avx512_bf16 or Arm bf16"``, ``"NVIDIA H100 supports bf16"``,
    ``"BERTKIT_BF16=0 turns native bf16 off"``..."""
    device = torch.device(device)
    if not bf16_allowed():
        return f"{BF16_ENV}={os.environ[BF16_ENV].strip()} turns native bf16 off"
    if device.type == "cuda":
        name = torch.cuda.get_device_name(device) if torch.cuda.is_available() else "this CUDA device"
        return f"{name} {'supports' if native_bf16(device) else 'has no native'} bf16"
    if device.type != "cpu":
        return f"bf16 autocast is not used on {device.type}"
    flags = _cpu_flags()
    if flags is None:
        return f"oneDNN reports {'' if cpu_bf16() else 'no '}bf16 support (the CPU flags are unreadable)"
    found = [flag for flag in BF16_FLAGS if flag in flags]
    if not found:
        return "this CPU has no amx_bf16, avx512_bf16 or Arm bf16"
    if not cpu_bf16():
        return f"this CPU has {', '.join(found)} but this torch's bf16 autocast matmul fails"
    return f"this CPU has {', '.join(found)}"
