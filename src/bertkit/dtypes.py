"""The number formats an inference model runs in, named once (no torch: the command line's ``--help`` reads them).

``dtype`` (``--dtype``) is how a loaded model's weights are prepared for inference: ``fp32``, ``bf16``, ``fp16``
or ``int8`` (dense layers quantized), or ``auto`` (:func:`bertkit.inference.precision.resolve` decides). Every
inference command and Python entry point takes these names. Two other words are not this one:

* ``precision`` of the *training* commands (``TrainingConfig.precision``): the autocast a run trains in, with fp32
  weights (:data:`bertkit.training.config.PRECISIONS`);
* ``precision`` of :meth:`bertkit.SentenceTransformer.encode`: how the *embeddings* are quantized after the model
  ran (``float32``, ``int8``, ``binary``...), sentence-transformers' name, kept for its users.
"""

from __future__ import annotations

#: what ``dtype=`` / ``--dtype`` takes (a torch dtype also works in Python; None keeps the model's dtype)
DTYPES = ("auto", "fp32", "bf16", "fp16", "int8")
#: torch's spellings of the float formats, accepted for them
ALIASES = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16", "half": "fp16"}
