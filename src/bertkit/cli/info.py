"""``bertkit info SIZE|DIR``: the architecture and parameter count of a preset or a checkpoint."""

from __future__ import annotations

from pathlib import Path

from bertkit.cli import ArgumentParser


def describe(source: str) -> str:
    """A few lines on ``source``: a preset size name or a checkpoint directory."""
    import torch

    from bertkit import BERTConfig, preset_config
    from bertkit.modeling import BERT

    is_dir = Path(source).is_dir()
    config = BERTConfig.from_json_file(Path(source) / "config.json") if is_dir else preset_config(source)
    with torch.device("meta"):  # count parameters without allocating them
        params = BERT(config).num_parameters()
    return (f"{source}: L={config.num_hidden_layers} H={config.hidden_size} A={config.num_attention_heads} "
            f"intermediate={config.intermediate_size} vocab={config.vocab_size} "
            f"act={config.activation_name()} decoder={config.is_decoder}\n"
            f"backbone parameters: {params / 1e6:.1f}M")


def main(argv: list[str]) -> int:
    parser = ArgumentParser(prog="bertkit info", description=__doc__)
    parser.add_argument("source", help="a size (tiny, mini, small, medium, base, large) or a checkpoint directory")
    args = parser.parse_args(argv)
    print(describe(args.source))
    return 0
