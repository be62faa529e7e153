"""``python -m bertkit.compat.pytorch_pretrained_bert convert_tf_checkpoint_to_pytorch TF_CKPT CONFIG DUMP``.

0.6.2's command line (its ``pytorch_pretrained_bert`` script), for the BERT converter; no
TensorFlow needed. Exit status 0 on success, 2 on a usage error.
"""

from __future__ import annotations

import sys

USAGE = ("Should be used as `python -m bertkit.compat.pytorch_pretrained_bert convert_tf_checkpoint_to_pytorch "
         "TF_CHECKPOINT TF_CONFIG PYTORCH_DUMP_OUTPUT`\n(the OpenAI GPT, Transformer-XL and GPT-2 converters of "
         "pytorch_pretrained_bert are not part of bertkit)")


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 4 or args[0] != "convert_tf_checkpoint_to_pytorch":
        print(USAGE, file=sys.stderr)
        return 2
    from bertkit.compat.pytorch_pretrained_bert.modeling import convert_tf_checkpoint_to_pytorch

    tf_checkpoint, tf_config, pytorch_dump_output = args[1:]
    convert_tf_checkpoint_to_pytorch(tf_checkpoint, tf_config, pytorch_dump_output)
    return 0


if __name__ == "__main__":
    sys.exit(main())
