"""Checkpoint formats and loading: HF directories (and, later, TF / ppb / registry)."""

from bertkit.weights.adapt import LoadReport
from bertkit.weights.hf import read_config, read_state_dict

__all__ = ["LoadReport", "read_config", "read_state_dict"]
