"""ADB framing and the phone-state JSON codec."""

from __future__ import annotations

import json
import random

import pytest

from venus_core.data.synth.i18n import ViewContext
from venus_core.data.synth.tasks import sample_episode
from venus_core.envs import adb_wire as w
from venus_core.envs.state_codec import StateDecodeError, decode_state, encode_state


def test_message_pack_parse_roundtrip() -> None:
    msg = w.Message(w.A_WRTE, 7, 9, b"hello")
    raw = msg.pack()
    hdr = w.parse_header(raw[:24], 1024)
    assert (hdr.command, hdr.arg0, hdr.arg1, hdr.length) == (w.A_WRTE, 7, 9, 5)
    assert hdr.check == sum(b"hello")
    w.verify_payload(hdr, raw[24:], w.VERSION_MIN)  # old protocol: checksum verified


def test_bad_headers_are_rejected() -> None:
    good = w.Message(w.A_OKAY, 1, 2).pack()
    bad_magic = good[:20] + b"\0\0\0\0"
    with pytest.raises(w.AdbProtocolError, match="bad magic"):
        w.parse_header(bad_magic, 1024)
    with pytest.raises(w.AdbProtocolError, match="unknown command"):
        w.parse_header(w.HEADER.pack(0x12345678, 0, 0, 0, 0, 0x12345678 ^ 0xFFFFFFFF), 1024)
    with pytest.raises(w.AdbProtocolError, match="exceeds"):
        w.parse_header(w.Message(w.A_WRTE, 1, 2, b"x" * 300).pack()[:24], 256)
    with pytest.raises(w.AdbProtocolError, match="short header"):
        w.parse_header(good[:10], 1024)
    hdr = w.parse_header(w.Message(w.A_WRTE, 1, 2, b"abc").pack()[:24], 1024)
    with pytest.raises(w.AdbProtocolError, match="checksum"):
        w.verify_payload(hdr, b"abd", w.VERSION_MIN)
    w.verify_payload(hdr, b"abd", w.VERSION_SKIP_CHECKSUM)  # newer hosts skip the checksum


def test_banner_and_service() -> None:
    banner = w.device_banner({"ro.product.model": "M"}, ("shell_v2", "cmd"))
    assert banner == b"device::ro.product.model=M;features=shell_v2,cmd"
    assert w.parse_service(b"shell,v2,raw:wm size\0") == "shell,v2,raw:wm size"
    with pytest.raises(w.AdbProtocolError):
        w.parse_service(b"\xff\xfe\0")
    assert w.shell_v2_packet(w.SHELL_EXIT, b"\x05") == b"\x03\x01\0\0\0\x05"


@pytest.mark.parametrize("level,seed", [(3, 0), (4, 1), (5, 2), (1, 3)])
def test_state_codec_roundtrip(level: int, seed: int) -> None:
    ep = sample_episode(random.Random(seed), level, ViewContext.for_output("mobile", "en", 360, 640))
    for state in [ep.start] + [m.state for m in ep.moves]:
        text = encode_state(state)
        assert decode_state(text) == state
        assert decode_state(text.encode()) == state


def test_state_codec_rejects_foreign_and_malformed_input() -> None:
    ep = sample_episode(random.Random(0), 3, ViewContext())
    good = json.loads(encode_state(ep.start))
    with pytest.raises(StateDecodeError, match="not JSON"):
        decode_state("{")
    evil = dict(good, __dc__="subprocess:Popen")
    with pytest.raises(StateDecodeError, match="outside"):
        decode_state(json.dumps(evil))
    extra = dict(good, bogus=1)
    with pytest.raises(StateDecodeError, match=r"\$: unknown fields \['bogus'\]"):
        decode_state(json.dumps(extra))
    missing = {k: v for k, v in good.items() if k != "foreground"}
    with pytest.raises(StateDecodeError, match="cannot build PhoneState"):
        decode_state(json.dumps(missing))
    with pytest.raises(StateDecodeError, match="expected a PhoneState"):
        decode_state(json.dumps(good["apps"][0][1]))
    nested = json.loads(json.dumps(good))
    nested["apps"][0][1]["__dc__"] = "venus_core.data.synth.apps.launcher:Nope"
    with pytest.raises(StateDecodeError, match=r"\$.apps\[0\]\[1\]: unknown type"):
        decode_state(json.dumps(nested))
