"""Every public BERT name of pytorch-pretrained-bert 0.6.2 exists in ``bertkit.compat.pytorch_pretrained_bert``.

The names are enumerated from the installed 0.6.2 package (``dir()`` of the package and of
its ``modeling``, ``tokenization``, ``optimization`` and ``file_utils`` modules), minus the
exclusions listed below with their reasons; each must exist in the compat module of the same
name, be the same kind of thing (class, function, module, constant of the same type), and
take 0.6.2's arguments (ours may add optional ones after them).
"""

from __future__ import annotations

import importlib
import inspect
import types

import pytest
import pytorch_pretrained_bert  # noqa: F401  (the package whose names are enumerated)
import torch

PACKAGES = {"pytorch_pretrained_bert": "bertkit.compat.pytorch_pretrained_bert"}
MODULES = ("", ".modeling", ".tokenization", ".optimization", ".file_utils")

#: 0.6.2's OpenAI GPT, GPT-2 and Transformer-XL: not BERT, not part of bertkit.
NOT_BERT = {
    "GPT2Config", "GPT2DoubleHeadsModel", "GPT2LMHeadModel", "GPT2Model", "GPT2Tokenizer", "OpenAIGPTConfig",
    "OpenAIGPTDoubleHeadsModel", "OpenAIGPTLMHeadModel", "OpenAIGPTModel", "OpenAIGPTTokenizer", "TransfoXLConfig",
    "TransfoXLCorpus", "TransfoXLLMHeadModel", "TransfoXLModel", "TransfoXLTokenizer", "load_tf_weights_in_gpt2",
    "load_tf_weights_in_openai_gpt", "load_tf_weights_in_transfo_xl", "modeling_gpt2", "modeling_openai",
    "modeling_transfo_xl", "modeling_transfo_xl_utilities", "tokenization_gpt2", "tokenization_openai",
    "tokenization_transfo_xl",
    # the module of OpenAIAdam; the optimizer itself is required (top level) and lives in compat.optimization
    "optimization_openai",
}
#: What 0.6.2's modules import from ``__future__``, the standard library, torch or third-party packages:
#: names of their namespaces, not of their API.
IMPORTED = {
    "absolute_import", "division", "print_function", "unicode_literals",  # __future__
    "abc", "collections", "copy", "fnmatch", "json", "logging", "math", "os", "shutil", "sys", "tarfile",
    "tempfile", "unicodedata", "ABC", "Path", "open", "sha256", "urlparse", "wraps",  # the standard library
    "torch", "nn", "CrossEntropyLoss", "Optimizer", "required", "clip_grad_norm_",  # torch
    "boto3", "ClientError", "requests", "tqdm",  # third-party
}
#: 0.6.2's S3 access through boto3: bertkit downloads over HTTP(S) only (``cached_path`` rejects s3:// URLs).
S3_ONLY = {"s3_etag", "s3_get", "s3_request", "split_s3_path"}
EXCLUDED = NOT_BERT | IMPORTED | S3_ONLY
#: Functions whose single argument has another name here: the engine's activations (torch's F.gelu, F.silu:
#: ``input``, 0.6.2's ``x``); called positionally, as 0.6.2 calls them.
ENGINE_ACTIVATIONS = {"gelu", "swish"}


def _modules():
    for suffix in MODULES:
        yield (importlib.import_module("pytorch_pretrained_bert" + suffix),
               importlib.import_module("bertkit.compat.pytorch_pretrained_bert" + suffix))


def _names(module: types.ModuleType) -> list[str]:
    return [n for n in dir(module) if not (n.startswith("__") and n.endswith("__")) and n not in EXCLUDED]


def _pairs():
    return [(theirs.__name__, name) for theirs, _ in _modules() for name in _names(theirs)]


def test_exclusions_are_real_and_not_bert_api():
    """Every excluded name occurs in 0.6.2, and the 'imported' ones are not defined by 0.6.2."""
    everywhere = {name: getattr(m, name) for m, _ in _modules() for name in dir(m)}
    assert set(everywhere) >= EXCLUDED, EXCLUDED - set(everywhere)
    for name in IMPORTED:
        obj = everywhere[name]
        origin = obj.__name__ if isinstance(obj, types.ModuleType) else getattr(obj, "__module__", None) or ""
        assert not origin.startswith("pytorch_pretrained_bert"), name


def test_every_public_bert_name_exists():
    missing = [f"{module}.{name}" for module, name in _pairs()
               if not hasattr(importlib.import_module(module.replace("pytorch_pretrained_bert",
                                                                     PACKAGES["pytorch_pretrained_bert"], 1)), name)]
    assert not missing, missing
    assert len(_pairs()) > 80  # the enumeration found the modules' names


def _kind(obj) -> str:
    if isinstance(obj, types.ModuleType):
        return "module " + obj.__name__.rsplit(".", 1)[-1]
    if inspect.isclass(obj):
        return "class"
    if callable(obj):
        return "callable"
    return type(obj).__name__


@pytest.mark.parametrize("module,name", _pairs())
def test_name_is_the_same_kind_with_ppb_arguments(module, name):
    theirs = getattr(importlib.import_module(module), name)
    ours = getattr(importlib.import_module(module.replace("pytorch_pretrained_bert",
                                                          PACKAGES["pytorch_pretrained_bert"], 1)), name)
    assert _kind(ours) == _kind(theirs)
    if inspect.isclass(theirs):
        for method in _ppb_methods(theirs):
            # nn.LayerNorm.forward's argument is called input (0.6.2's x); modules are called positionally
            exact = not (method == "forward" and issubclass(ours, torch.nn.LayerNorm))
            _assert_extends(getattr(ours, method), getattr(theirs, method), f"{name}.{method}", exact_names=exact)
    elif name in ENGINE_ACTIVATIONS:
        x = torch.linspace(-3, 3, 7)
        torch.testing.assert_close(ours(x), theirs(x))
    elif inspect.isfunction(theirs):
        _assert_extends(ours, theirs, name)


def _ppb_methods(cls: type) -> list[str]:
    """The public methods (and ``__init__``) that 0.6.2 itself defines on ``cls`` or its 0.6.2 bases."""
    found = []
    for name in dir(cls):
        member = getattr(cls, name)
        if (name == "__init__" or not name.startswith("_") or name == "get_lr_") and callable(member) \
                and (getattr(member, "__module__", None) or "").startswith("pytorch_pretrained_bert"):
            found.append(name)
    return found


def _parameters(fn) -> list[inspect.Parameter]:
    return [p for p in inspect.signature(fn).parameters.values()
            if p.name not in ("self", "cls") and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]


def _assert_extends(ours, theirs, what: str, exact_names: bool = True) -> None:
    """``ours`` takes ``theirs``' parameters (names, order, defaults; ours may give a required one a default);
    anything it adds has a default."""
    mine, reference = _parameters(ours), _parameters(theirs)
    assert len(mine) >= len(reference), f"{what}: {mine} lacks parameters of {reference}"
    for a, b in zip(mine, reference):
        assert b.default is inspect.Parameter.empty or a.default is b.default or a.default == b.default, \
            f"{what}: {a} vs {b}"
        if exact_names or b.default is not inspect.Parameter.empty:
            assert a.name == b.name, f"{what}: {a} vs {b}"
    assert all(p.default is not inspect.Parameter.empty for p in mine[len(reference):]), what
