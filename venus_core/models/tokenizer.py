"""The tiny model's tokenizer: byte-level BPE trained here, wrapped as a Qwen2 fast tokenizer.

Why: the embedded default model must work with no model hub, so its tokenizer is trained locally
(`tokenizers`, a few hundred merges, well under a second) on a corpus this module generates: the
UI-Venus prompts, canonical action strings over random arguments, navigation answers, digits and
coordinates, and English and Chinese UI labels. It uses Qwen2's pre-tokenizer (split regex, then
byte level, NFC), Qwen's special tokens and a Qwen-style chat template, so every code path that
handles real Qwen-VL checkpoints (chat template, `<|image_pad|>` expansion, `<|im_end|>` stopping)
is exercised by the tiny model too.

Departure from Qwen: the vocabulary is ~640 tokens instead of ~151k, so the special tokens get small
ids; code must read ids from the tokenizer, never hard-code Qwen's.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterator

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
from transformers import Qwen2Tokenizer

from venus_core.actions import (
    CallUser,
    Click,
    DoubleClick,
    Drag,
    Finished,
    Hotkey,
    Hover,
    Launch,
    LongPress,
    PressBack,
    PressEnter,
    PressHome,
    PressRecent,
    Scroll,
    Type,
    Wait,
    render_action,
    render_point,
)
from venus_core.actions.space import Action
from venus_core.models.prompts import grounding_prompt, navigation_prompt

ENDOFTEXT = "<|endoftext|>"
IM_START = "<|im_start|>"
IM_END = "<|im_end|>"
VISION_START = "<|vision_start|>"
VISION_END = "<|vision_end|>"
IMAGE_PAD = "<|image_pad|>"
VIDEO_PAD = "<|video_pad|>"

SPECIAL_TOKENS: tuple[str, ...] = (
    ENDOFTEXT,
    IM_START,
    IM_END,
    "<|object_ref_start|>",
    "<|object_ref_end|>",
    "<|box_start|>",
    "<|box_end|>",
    "<|quad_start|>",
    "<|quad_end|>",
    VISION_START,
    VISION_END,
    "<|vision_pad|>",
    IMAGE_PAD,
    VIDEO_PAD,
)
"""Qwen2.5-VL / Qwen3-VL special tokens (same names, tiny ids)."""

ADDED_TOKENS: tuple[str, ...] = ("<tool_call>", "</tool_call>", "<think>", "</think>")
"""Non-special added tokens of Qwen3: kept when decoding with skip_special_tokens=True."""

# Qwen2's pre-tokenization regex (letters, single digits, punctuation runs, newlines, spaces).
PRETOKENIZE_REGEX = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)

CHAT_TEMPLATE = (
    "{%- for message in messages -%}"
    "{{- '<|im_start|>' + message['role'] + '\\n' -}}"
    "{%- if message['content'] is string -%}{{- message['content'] -}}"
    "{%- else -%}{%- for item in message['content'] -%}"
    "{%- if item['type'] == 'image' or 'image' in item or 'image_url' in item -%}"
    "{{- '<|vision_start|><|image_pad|><|vision_end|>' -}}"
    "{%- elif item['type'] == 'video' or 'video' in item -%}"
    "{{- '<|vision_start|><|video_pad|><|vision_end|>' -}}"
    "{%- elif item['type'] == 'text' -%}{{- item['text'] -}}"
    "{%- endif -%}{%- endfor -%}{%- endif -%}"
    "{{- '<|im_end|>\\n' -}}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}"
)
"""Qwen3-VL's chat layout (no default system turn): `<|im_start|>role\\n…<|im_end|>\\n`, an image
as `<|vision_start|><|image_pad|><|vision_end|>` which the processor expands to one pad per visual
token. Tool calls and reasoning-content handling of the real template are left out."""

EN_LABELS: tuple[str, ...] = (
    "Settings", "Search", "Login", "Sign in", "Sign up", "Password", "Username", "Email", "Submit",
    "Cancel", "OK", "Back", "Home", "Menu", "Profile", "Cart", "Checkout", "Buy now", "Add to cart",
    "Next", "Previous", "Save", "Delete", "Edit", "Share", "Send", "Message", "Contacts", "Camera",
    "Photos", "Music", "Play", "Pause", "Calendar", "Clock", "Alarm", "Weather", "Maps", "Browser",
    "Notes", "Files", "Download", "Upload", "Close", "Open", "More", "Help", "Filter", "Sort",
    "red", "green", "blue", "yellow", "orange", "purple", "black", "white", "gray", "button", "icon",
    "the", "a", "on", "in", "of", "to", "and", "with", "top", "bottom", "left", "right", "center",
    "first", "second", "third", "item", "tab", "list", "page", "screen", "click", "tap", "open",
    "search for", "type", "scroll", "down", "up", "select", "choose", "enable", "disable", "turn on",
)
ZH_LABELS: tuple[str, ...] = (
    "设置", "搜索", "登录", "注册", "密码", "用户名", "邮箱", "提交", "取消", "确定", "返回", "首页",
    "菜单", "我的", "购物车", "结算", "立即购买", "下一步", "保存", "删除", "编辑", "分享", "发送",
    "消息", "联系人", "相机", "相册", "音乐", "播放", "暂停", "日历", "时钟", "闹钟", "天气", "地图",
    "浏览器", "备忘录", "文件", "下载", "关闭", "打开", "更多", "帮助", "红色", "绿色", "蓝色", "按钮",
)
APPS: tuple[str, ...] = ("Settings", "Chrome", "Gmail", "Maps", "Camera", "Clock", "Contacts",
                         "Calendar", "Files", "Photos", "Messages", "微信", "支付宝", "淘宝")
URLS: tuple[str, ...] = ("https://www.example.com", "https://shop.example.org/cart",
                         "http://localhost:8000/login", "https://news.example.net/?q=venus")
KEYS: tuple[str, ...] = ("ctrl", "shift", "alt", "c", "v", "a", "z", "tab", "enter", "esc", "f5")


def _label(rng: random.Random) -> str:
    pool = ZH_LABELS if rng.random() < 0.3 else EN_LABELS
    return " ".join(rng.choice(pool) for _ in range(rng.randint(1, 3)))


def _point(rng: random.Random) -> tuple[int, int]:
    return (rng.randint(0, 1000), rng.randint(0, 1000))


def random_action(rng: random.Random) -> Action:
    """One action of any of the 16 types with random arguments (web and mobile forms)."""
    kind = rng.randrange(16)
    if kind == 0:
        return Click(box=_point(rng))
    if kind == 1:
        return Drag(start=_point(rng), end=_point(rng))
    if kind == 2:
        direction = rng.choice(("up", "down", "left", "right"))
        if rng.random() < 0.5:
            return Scroll(direction=direction)
        return Scroll(start=_point(rng), end=_point(rng), direction=direction)
    if kind == 3:
        return Type(content=_label(rng))
    if kind == 4:
        return Launch(app=rng.choice(APPS)) if rng.random() < 0.6 else Launch(url=rng.choice(URLS))
    if kind == 5:
        return Wait()
    if kind == 6:
        return Finished(content=_label(rng) if rng.random() < 0.5 else "")
    if kind == 7:
        return CallUser(content=_label(rng))
    if kind == 8:
        return LongPress(box=_point(rng))
    if kind in (9, 10, 11, 12):
        return (PressBack(), PressHome(), PressEnter(), PressRecent())[kind - 9]
    if kind == 13:
        return Hover(box=_point(rng))
    if kind == 14:
        return DoubleClick(box=_point(rng))
    return Hotkey(keys=tuple(rng.sample(KEYS, rng.randint(1, 3))))


def corpus(seed: int, n: int = 600) -> Iterator[str]:
    """The tokenizer training corpus: deterministic in `seed`, ~n lines of each kind."""
    rng = random.Random(seed)
    yield " ".join(str(i) for i in range(1001))
    yield grounding_prompt("placeholder")
    for platform in ("mobile", "web"):
        yield navigation_prompt("placeholder", [], platform)  # type: ignore[arg-type]
    for _ in range(n):
        action = render_action(random_action(rng))
        think = f"I need to {_label(rng)} the {_label(rng)}."
        yield f"<think>{think}</think><action>{action}</action><conclusion>{_label(rng)}</conclusion>"
        yield f"Step {rng.randint(1, 30)}: <think>{think}</think><action>{action}</action>"
        yield grounding_prompt(_label(rng)) + " " + render_point(_point(rng))
        yield f"What is the {_label(rng)}? {_label(rng)} [-1,-1]"


def train_tokenizer(vocab_size: int, seed: int) -> Qwen2Tokenizer:
    """Train the byte-level BPE and wrap it; `len(result) == vocab_size` exactly."""
    n_extra = len(SPECIAL_TOKENS) + len(ADDED_TOKENS)
    bpe_size = vocab_size - n_extra
    if bpe_size < 256 + 8:
        raise ValueError(
            f"tiny.vocab_size {vocab_size} is too small: needs 256 byte tokens + 8 merges + "
            f"{n_extra} special/added tokens = {256 + 8 + n_extra}"
        )
    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(PRETOKENIZE_REGEX), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    trainer = trainers.BpeTrainer(
        vocab_size=bpe_size,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(corpus(seed), trainer)
    state = json.loads(tok.to_str())["model"]
    merges = [tuple(m) if isinstance(m, list) else tuple(m.split(" ")) for m in state["merges"]]
    vocab: dict[str, int] = dict(state["vocab"])
    if len(vocab) != bpe_size:
        raise RuntimeError(
            f"BPE training produced {len(vocab)} tokens, expected {bpe_size}: the generated corpus "
            "has too few distinct pairs for this tiny.vocab_size"
        )
    # The ids of special and added tokens follow the BPE ones, in the order above (like Qwen).
    for i, t in enumerate(SPECIAL_TOKENS + ADDED_TOKENS):
        vocab[t] = bpe_size + i
    wrapped = Qwen2Tokenizer(
        vocab=vocab,
        merges=merges,
        unk_token=None,
        eos_token=IM_END,
        pad_token=ENDOFTEXT,
        bos_token=None,
        errors="replace",
        model_max_length=32768,
    )
    wrapped.add_tokens([AddedToken(t, special=True, normalized=False) for t in SPECIAL_TOKENS], special_tokens=True)
    wrapped.add_tokens([AddedToken(t, special=False, normalized=False) for t in ADDED_TOKENS])
    wrapped.chat_template = CHAT_TEMPLATE
    if len(wrapped) != vocab_size:
        raise RuntimeError(f"tokenizer has {len(wrapped)} tokens, expected {vocab_size}")
    return wrapped
