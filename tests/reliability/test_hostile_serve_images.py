"""Hostile images sent to `venus serve` (issue 22 §1): a base64 image in a chat request is decoded
with the dataset store's safe decoder, so a decompression bomb is refused from its header (a 78 kB
PNG of 9,000 x 9,000 black pixels, below PIL's own bomb limit, made the server's RSS grow by
~390 MB before), and a truncated or mislabelled image is a 400 naming the message part."""

from __future__ import annotations

import base64
import subprocess
import sys
from pathlib import Path

import pytest
from hostile_files import bomb, image_bytes
from PIL import Image

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
    with pytest.raises(BadRequest) as err:
        decode_data_url(_url(data), PARAM)
    assert err.value.param == PARAM and err.value.status == 400 and words in err.value.message


def test_a_compressed_bomb_never_grows_the_process(tmp_path: Path) -> None:
    """Measured in a fresh process (RSS high-water mark before and after): PIL allocates outside
    tracemalloc's view, and this process's own peak would hide the growth."""
    bomb_file = tmp_path / "black.png"
    Image.new("L", (9000, 9000)).save(bomb_file, format="PNG")  # ~78 kB
    script = (
        "import base64, resource, sys\n"
        "from venus_core.models.serve_protocol import BadRequest, decode_data_url\n"
        "url = 'data:image/png;base64,' + base64.b64encode(open(sys.argv[1], 'rb').read()).decode()\n"
        "before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss\n"
        "try:\n    decode_data_url(url, 'image')\nexcept BadRequest as exc:\n    print(exc.message)\n"
        "print((resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) // 1024)\n")
    out = subprocess.run([sys.executable, "-c", script, str(bomb_file)], capture_output=True, text=True,
                         timeout=120, check=True).stdout.splitlines()
    assert "exceeds 67108864 pixels" in out[0] and int(out[1]) < 32, out  # MiB of growth


def test_a_jpeg_labelled_png_is_decoded_as_what_it_is() -> None:
    img = decode_data_url(_url(image_bytes(32, 24, fmt="JPEG"), "image/png"), PARAM)
    assert img.mode == "RGB" and img.size == (32, 24)
