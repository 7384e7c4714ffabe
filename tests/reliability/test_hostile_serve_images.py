"""Hostile images sent to `venus serve` (issue 22 §1): a base64 image in a chat request is decoded
with the dataset store's safe decoder, so a decompression bomb is refused from its header (a few
dozen bytes claiming 10^10 pixels would otherwise allocate 30 GB on `convert("RGB")`), and a
truncated or mislabelled image is a 400 naming the message part, never a server error."""

from __future__ import annotations

import base64
import tracemalloc

import pytest
from hostile_files import bomb, image_bytes

from venus_core.models.serve_protocol import BadRequest, decode_data_url

PARAM = "messages[0].content[0].image_url"


def _url(data: bytes, mime: str = "image/png") -> str:
    return f"data:{mime};base64,{base64.b64encode(data).decode()}"


@pytest.mark.parametrize(("data", "words"), [
    (bomb(100_000, 100_000), "exceeds"),
    (bomb(9000, 9000), "exceeds 67108864 pixels"),  # below PIL's own bomb limit, above the store's
    (image_bytes(32, 24)[:40], "not a decodable image"),
    (b"GIF89a but not really", "not a decodable image"),
    (b"", "not a decodable image"),
])
def test_a_hostile_image_is_a_bad_request_naming_the_part(data: bytes, words: str) -> None:
    tracemalloc.start()
    try:
        with pytest.raises(BadRequest) as err:
            decode_data_url(_url(data), PARAM)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert err.value.param == PARAM and err.value.status == 400 and words in err.value.message
    assert peak < 8 << 20  # the bomb's pixels were never allocated


def test_a_jpeg_labelled_png_is_decoded_as_what_it_is() -> None:
    img = decode_data_url(_url(image_bytes(32, 24, fmt="JPEG"), "image/png"), PARAM)
    assert img.mode == "RGB" and img.size == (32, 24)
