"""bertkit: the BERT model family for PyTorch.

Start with :class:`BERTConfig` and :class:`BERT`, a task model such as
:class:`BERTForSequenceClassification`, or a factory like ``bert_for_masked_lm_base()``.
"""

from bertkit import models
from bertkit.config import BERTConfig
from bertkit.modeling import *  # noqa: F403
from bertkit.modeling import __all__ as _modeling_all
from bertkit.presets import SIZES, preset_config

__version__ = "0.1.0"
__all__ = ["SIZES", "BERTConfig", "preset_config", *_modeling_all]
