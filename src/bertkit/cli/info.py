"""``bertkit info SIZE|DIR|CONFIG``: the architecture and parameter count of a preset or a checkpoint.

Parameters are counted from the config alone (:func:`bertkit.modeling.counting.count_parameters`), so
nothing is built or allocated: a config of any size is described at once.
"""

from __future__ import annotations

from pathlib import Path

from bertkit.cli import ArgumentParser

TAKES = "info takes a size (tiny, mini, small, medium, base, large), a checkpoint directory, or its config.json"


def describe(source: str) -> str:
    """A few lines on ``source``: a preset size name, a checkpoint directory or a config JSON file. The
    architecture's head (``config.json``'s ``architectures``) is counted too when bertkit knows it."""
    from bertkit.modeling.counting import POOLED, backbone_parameters, count_parameters

    config, architecture = _config_of(source)
    lines = [f"{source}: L={config.num_hidden_layers} H={config.hidden_size} A={config.num_attention_heads} "
             f"intermediate={config.intermediate_size} vocab={config.vocab_size} "
             f"act={config.activation_name()} decoder={config.is_decoder}",
             f"backbone parameters: {backbone_parameters(config) / 1e6:.1f}M"]
    if architecture in POOLED and architecture != "BertModel":
        lines.append(f"with its head ({architecture}): {count_parameters(config, architecture) / 1e6:.1f}M")
    return "\n".join(lines)


def _config_of(source: str):
    """``(config, architecture or None)`` of a size, a directory or a JSON file; anything else is a ValueError
    saying what ``source`` is and what info takes."""
    from bertkit import BERTConfig, preset_config
    from bertkit.io import read_json_object
    from bertkit.presets import SIZES

    path = Path(source)
    if path.is_dir() and (path / "config.json").is_file():
        path = path / "config.json"
    elif source in SIZES:  # a size, also when a folder without a config happens to bear its name
        return preset_config(source), None
    elif path.is_dir():
        raise ValueError(f"{source} is a directory without a config.json, so not a checkpoint; {TAKES}.")
    elif path.is_file() and path.suffix.lower() != ".json":
        raise ValueError(f"{source} is a file but not a model config (not .json); {TAKES}.")
    elif not path.is_file():
        raise ValueError(f"{source} is neither a model size nor an existing file or directory; {TAKES}.")
    architectures = read_json_object(path, "a model config").get("architectures") or [None]
    return BERTConfig.from_json_file(path), architectures[0]


def main(argv: list[str]) -> int:
    parser = ArgumentParser(prog="bertkit info", description=__doc__)
    parser.add_argument("source", help="a size (tiny, mini, small, medium, base, large), a checkpoint directory or "
                                       "its config.json")
    args = parser.parse_args(argv)
    print(describe(args.source))
    return 0
