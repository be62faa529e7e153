"""The Rust (``tokenizers``) pipelines that reproduce Google's BasicTokenizer + WordPiece.

normalizer:     remove controls -> whitespace to " " -> lowercase -> NFD -> drop Mn
pre-tokenizer:  one regex pass: runs of word characters, each punctuation mark, each CJK ideograph
model:          greedy longest-match WordPiece with "##" continuations
post-processor: [CLS] A [SEP] (B [SEP]) with segment ids 0 / 1

Every character class comes from :mod:`bertkit.tokenization.unicode` (Python's
``unicodedata``), so the decisions are the reference's. Lower-casing is per character
in Rust; the one context-dependent case of Python's ``str.lower`` (final sigma) is
applied by the caller before encoding.

:func:`build_backend` with ``ascii_only=True`` builds the same pipeline for texts that are
pure ASCII, where accents, CJK and Unicode whitespace cannot occur: only ASCII control
characters are removed and only ASCII is lower-cased, which makes it markedly faster and,
on such texts, identical.
"""

from __future__ import annotations

from collections.abc import Mapping

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors

from bertkit.tokenization.unicode import char_classes

#: ASCII characters Google's clean-up removes (control characters other than \t \n \r)
_ASCII_CONTROLS = r"[\x00-\x08\x0B\x0C\x0E-\x1F\x7F]"


def build_normalizer(*, lowercase: bool, strip_accents: bool, ascii_only: bool = False) -> normalizers.Normalizer:
    classes = char_classes()
    if ascii_only:
        steps = [normalizers.Replace(Regex(_ASCII_CONTROLS), "")]
    else:
        steps = [normalizers.Replace(Regex(classes["remove"]), ""),
                 normalizers.Replace(Regex(classes["whitespace"]), " ")]
    if lowercase:
        steps.append(normalizers.Lowercase())
    if strip_accents and not ascii_only:
        steps += [normalizers.NFD(), normalizers.Replace(Regex(classes["nonspacing_mark"]), "")]
    return normalizers.Sequence(steps)


def build_pre_tokenizer(*, tokenize_chinese_chars: bool) -> pre_tokenizers.PreTokenizer:
    """Words (runs of anything but separators, punctuation and CJK), and single punctuation / CJK characters."""
    classes = char_classes()
    isolated = classes["punctuation"][1:-1] + (classes["cjk"][1:-1] if tokenize_chinese_chars else "")
    word = f"[^{classes['separator'][1:-1]}{isolated}]+"
    return pre_tokenizers.Split(Regex(f"{word}|[{isolated}]"), behavior="removed", invert=True)


def build_backend(vocab: Mapping[str, int], *, lowercase: bool, strip_accents: bool, tokenize_chinese_chars: bool,
                  special_tokens: Mapping[str, str], max_input_chars_per_word: int,
                  ascii_only: bool = False) -> Tokenizer:
    """A configured ``tokenizers.Tokenizer``; ``special_tokens`` maps ``cls_token`` etc. to tokens."""
    backend = Tokenizer(models.WordPiece(dict(vocab), unk_token=special_tokens["unk_token"],
                                         max_input_chars_per_word=max_input_chars_per_word))
    backend.normalizer = build_normalizer(lowercase=lowercase, strip_accents=strip_accents, ascii_only=ascii_only)
    backend.pre_tokenizer = build_pre_tokenizer(tokenize_chinese_chars=tokenize_chinese_chars)
    cls, sep = special_tokens["cls_token"], special_tokens["sep_token"]
    backend.post_processor = processors.TemplateProcessing(
        single=f"{cls}:0 $A:0 {sep}:0", pair=f"{cls}:0 $A:0 {sep}:0 $B:1 {sep}:1",
        special_tokens=[(cls, vocab[cls]), (sep, vocab[sep])])
    backend.decoder = decoders.WordPiece(prefix="##", cleanup=False)
    # special tokens written in the text are recognised as such (HF's behaviour), before normalisation
    backend.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in special_tokens.values()])
    return backend
