"""bertkit.devices: the one place that asks the machine for a GPU and for native bf16."""

from __future__ import annotations

import pytest
import torch

from bertkit import devices
from bertkit.inference import native_bf16
from bertkit.modeling.text import resolve_device
from bertkit.training import cpu_supports_bf16, resolve_precision
from bertkit.training import resolve_device as training_device


def test_every_layer_asks_the_same_bf16_question():
    assert native_bf16 is devices.native_bf16 and cpu_supports_bf16 is devices.cpu_bf16
    assert native_bf16("cpu") == devices.cpu_bf16()
    assert resolve_precision("auto", torch.device("cpu")) == ("bf16" if devices.cpu_bf16() else "fp32")
    assert not native_bf16("meta")


def test_cpu_bf16_follows_the_cpu_flags(monkeypatch):
    for flags, expected in (({"avx512f"}, False), ({"avx512f", "avx512_bf16"}, True), ({"amx_bf16"}, True)):
        devices.cpu_bf16.cache_clear()
        monkeypatch.setattr(devices, "_cpu_flags", lambda flags=flags: flags)
        assert devices.cpu_bf16() is expected  # the autocast probe runs on any CPU torch supports
    devices.cpu_bf16.cache_clear()


@pytest.mark.skipif(torch.cuda.is_available() or torch.backends.mps.is_available(), reason="a GPU is present")
def test_gpu_without_one_names_the_request():
    with pytest.raises(ValueError, match=r'device="gpu" was requested but no GPU is available'):
        resolve_device("gpu")
    with pytest.raises(ValueError, match=r"TrainingConfig.device='gpu' was requested but no GPU is available"):
        training_device("gpu")
    assert resolve_device("cpu") == training_device("auto") == torch.device("cpu")


def test_int8_saturates_on_x86_without_vnni_or_amx(monkeypatch):
    cases = (("x86_64", {"avx2"}, True), ("x86_64", {"avx2", "avx512f", "avx512_vnni"}, False),
             ("x86_64", {"avx2", "avx_vnni"}, True), ("x86_64", {"amx_int8"}, False), ("aarch64", {"asimd"}, False))
    for machine, flags, expected in cases:
        devices.int8_saturates.cache_clear()
        monkeypatch.setattr(devices.platform, "machine", lambda machine=machine: machine)
        monkeypatch.setattr(devices, "_cpu_flags", lambda flags=flags: flags)
        assert devices.int8_saturates() is expected, (machine, flags)
    devices.int8_saturates.cache_clear()
