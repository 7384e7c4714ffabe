"""Coverage-guided fuzzing with atheris (libFuzzer) of the text parsers: a script, one target per run.

    python tests/reliability/atheris_targets.py TARGET [CORPUS_DIR] -atheris_runs=N [libFuzzer flags]

Why beside hypothesis: hypothesis generates from strategies we wrote, so it explores what we
thought of; atheris mutates raw bytes guided by the branch coverage of the instrumented venus_core
modules, so it finds inputs that reach code paths nobody wrote a strategy for. It fits the parsers
whose input is one string or one byte string (the action, navigation and point parsers, the judge
reply, an agent-spec file, a gateway token); the importers need whole source trees, which
hypothesis builds (test_fuzz_importers.py). libFuzzer exits the process on the first crash (an
exception other than the target's documented errors), so each target runs in its own process
(test_fuzz_atheris.py); the exit status is 0 when all runs passed.
"""

from __future__ import annotations

import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

import atheris

with atheris.instrument_imports(include=["venus_core"]):
    from venus_core.actions import (
        ActionParseError,
        parse_action,
        parse_navigation,
        parse_point,
        render_action,
        render_navigation,
    )
    from venus_core.config.loader import SpecError, load_spec
    from venus_core.daas.errors import TokenError
    from venus_core.daas.tokens import TokenSigner
    from venus_core.models.openai_client import ChatError, completion_texts, reply_json
    from venus_core.scoring.protocol import JudgeReplyError, parse_reply

SIGNER = TokenSigner(b"atheris-secret-0123456789")
SPEC_DIR = Path(tempfile.mkdtemp(prefix="venus-atheris-"))


PLATFORMS = ("mobile", "web")


def _text(data: bytes) -> str:
    """The input as text (UTF-8, invalid bytes replaced), so that a seed corpus of real answers
    is what the parser sees and libFuzzer's byte mutations stay close to it."""
    return data.decode("utf-8", errors="replace")


def action(data: bytes) -> None:
    text = _text(data)
    for platform in PLATFORMS:
        try:
            parsed = parse_action(text, platform)
        except ActionParseError:
            continue
        assert parse_action(render_action(parsed), platform) == parsed


def navigation(data: bytes) -> None:
    text = _text(data)
    for platform in PLATFORMS:
        try:
            step = parse_navigation(text, platform)
        except ActionParseError:
            continue
        assert parse_navigation(render_navigation(step), platform) == step


def point(data: bytes) -> None:
    try:
        parse_point(_text(data))
    except ActionParseError:
        return


def judge(data: bytes) -> None:
    try:
        texts = completion_texts(reply_json(data, "atheris"))
    except (ChatError, ValueError):  # not JSON / not a chat completion (the client makes it a ChatError)
        return
    try:
        parse_reply(texts[0], "grounding", "atheris")
    except JudgeReplyError:
        return


def spec(data: bytes) -> None:
    path = SPEC_DIR / "agent.yaml"
    path.write_bytes(data)
    try:
        load_spec(path)
    except SpecError:
        return


def token(data: bytes) -> None:
    """A token over arbitrary bytes *with a valid MAC*: reaches the claim checks behind it."""
    import base64
    import hashlib
    import hmac

    def b64(raw: bytes) -> str:
        return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()

    mac = hmac.new(b"atheris-secret-0123456789", data, hashlib.sha256).digest()
    try:
        SIGNER.verify(f"{b64(data)}.{b64(mac)}", device="d", client="c", now=0.0)
    except TokenError:
        return


TARGETS: dict[str, Callable[[bytes], None]] = {
    "action": action, "navigation": navigation, "point": point, "judge": judge, "spec": spec, "token": token,
}


def main() -> None:
    if len(sys.argv) < 2 or sys.argv[1] not in TARGETS:
        sys.exit(f"usage: {sys.argv[0]} {{{'|'.join(TARGETS)}}} [-atheris_runs=N ...]")
    name = sys.argv.pop(1)
    atheris.Setup(sys.argv, TARGETS[name])
    atheris.Fuzz()


if __name__ == "__main__":
    main()
