"""Token-level F1 between two strings (content rewards and text-based evaluation).

Why our own tokenizer: model outputs mix English and Chinese. Whitespace splitting treats a whole
Chinese sentence as one token, so CJK characters are split into single-character tokens while
other text is lower-cased and split into words with punctuation removed. This follows the
SQuAD-style F1 used by AndroidControl-type evaluations for text arguments.
"""

from __future__ import annotations

import re
import unicodedata
from collections import Counter

_WORD = re.compile(r"[^\W_]+", re.UNICODE)


def _is_cjk(ch: str) -> bool:
    code = ord(ch)
    return (
        0x4E00 <= code <= 0x9FFF
        or 0x3400 <= code <= 0x4DBF
        or 0x20000 <= code <= 0x2A6DF
        or 0xF900 <= code <= 0xFAFF
        or 0x3040 <= code <= 0x30FF  # kana
        or 0xAC00 <= code <= 0xD7AF  # hangul
    )


def tokenize(text: str) -> list[str]:
    """Lower-cased word tokens; CJK characters are tokens of their own.

    >>> tokenize("Hello, World! 你好")
    ['hello', 'world', '你', '好']
    """
    text = unicodedata.normalize("NFKC", text).lower()
    tokens: list[str] = []
    for word in _WORD.findall(text):
        buf = ""
        for ch in word:
            if _is_cjk(ch):
                if buf:
                    tokens.append(buf)
                    buf = ""
                tokens.append(ch)
            else:
                buf += ch
        if buf:
            tokens.append(buf)
    return tokens


def token_f1(prediction: str, reference: str) -> float:
    """Token-level F1 in [0, 1]; two texts without tokens (e.g. both empty) score 1.

    >>> token_f1("buy milk", "buy the milk")
    0.8
    >>> token_f1("", "")
    1.0
    """
    pred, ref = tokenize(prediction), tokenize(reference)
    if not pred and not ref:
        return 1.0
    if not pred or not ref:
        return 0.0
    common = sum((Counter(pred) & Counter(ref)).values())
    if common == 0:
        return 0.0
    precision = common / len(pred)
    recall = common / len(ref)
    return 2 * precision * recall / (precision + recall)
