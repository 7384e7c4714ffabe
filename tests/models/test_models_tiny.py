"""The tiny default: tokenizer, build, determinism, HF round trip, loading rules."""

from __future__ import annotations

import json
import random
import shutil
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from transformers import AutoProcessor, AutoTokenizer

from venus_core.actions import render_action
from venus_core.config.spec import ModelSpec, TinyModelSpec
from venus_core.models.loading import load_model, resolve_dtype, save_model, tiny_spec_of
from venus_core.models.processor import VenusVLProcessor, load_processor
from venus_core.models.tiny import build_tiny, mrope_section
from venus_core.models.tokenizer import ADDED_TOKENS, SPECIAL_TOKENS, random_action, train_tokenizer

from models_helpers import screen


def test_tokenizer_size_specials_and_round_trip() -> None:
    tok = train_tokenizer(640, seed=0)
    assert len(tok) == 640 and type(tok).__name__ == "Qwen2Tokenizer"
    for t in SPECIAL_TOKENS + ADDED_TOKENS:
        ids = tok(t, add_special_tokens=False)["input_ids"]
        assert len(ids) == 1 and tok.convert_ids_to_tokens(ids[0]) == t
    rng = random.Random(5)
    texts = [render_action(random_action(rng)) for _ in range(200)] + ["登录 设置 搜索『x』", "Step 12: [-1,-1]"]
    for text in texts:
        assert tok.decode(tok(text)["input_ids"]) == text
    assert tok.decode(tok("<|im_end|><think>a</think>")["input_ids"], skip_special_tokens=True) == "<think>a</think>"
    assert tok.eos_token == "<|im_end|>" and tok.pad_token == "<|endoftext|>"


def test_tokenizer_is_deterministic_in_seed_and_checks_size() -> None:
    a = train_tokenizer(500, seed=1).backend_tokenizer.to_str()
    assert a == train_tokenizer(500, seed=1).backend_tokenizer.to_str()
    assert a != train_tokenizer(500, seed=2).backend_tokenizer.to_str()
    with pytest.raises(ValueError, match="too small"):
        train_tokenizer(270, seed=0)


def test_mrope_sections_sum_to_half_head_dim() -> None:
    for hd in (8, 16, 32, 64, 128):
        sec = mrope_section(hd)
        assert sum(sec) == hd // 2 and min(sec) >= 1
    assert mrope_section(128) == [24, 20, 20]


def test_build_writes_hf_dir_fast_and_deterministically(tmp_path: Path) -> None:
    spec = TinyModelSpec(seed=3)
    t0 = time.perf_counter()
    out = build_tiny(spec, tmp_path / "a")
    elapsed = time.perf_counter() - t0
    assert elapsed < 10, f"tiny build took {elapsed:.1f}s"
    names = {p.name for p in out.iterdir()}
    assert {"config.json", "model.safetensors", "processor_config.json", "tokenizer.json",
            "chat_template.jinja", "generation_config.json"} <= names
    assert not list(out.glob("*.bin"))
    assert tiny_spec_of(out) == spec
    again = build_tiny(spec, tmp_path / "b")
    wa, wb = load_file(out / "model.safetensors"), load_file(again / "model.safetensors")
    assert wa.keys() == wb.keys() and all(torch.equal(wa[k], wb[k]) for k in wa)
    other = load_file(build_tiny(TinyModelSpec(seed=4), tmp_path / "c") / "model.safetensors")
    assert not torch.equal(other["lm_head.weight"], wa["lm_head.weight"])
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["model_type"] == "qwen3_vl" and cfg["text_config"]["vocab_size"] == spec.vocab_size
    with pytest.raises(FileExistsError):
        build_tiny(spec, out)


def test_processor_reloads_through_auto_processor(tiny_dir: Path) -> None:
    proc = AutoProcessor.from_pretrained(tiny_dir)
    assert isinstance(proc, VenusVLProcessor)
    assert type(proc.image_processor).__name__ == "Qwen2VLImageProcessorPil"
    assert proc.image_processor.size["longest_edge"] == 128 * 128
    assert type(AutoTokenizer.from_pretrained(tiny_dir)).__name__ == "Qwen2Tokenizer"
    text = proc.apply_chat_template(
        [{"role": "user", "content": [{"type": "image", "image": screen((1, 2, 3))}, {"type": "text", "text": "hi"}]}],
        tokenize=False, add_generation_prompt=True,
    )
    assert text == "<|im_start|>user\n<|vision_start|><|image_pad|><|vision_end|>hi<|im_end|>\n<|im_start|>assistant\n"


def _logits(model, processor) -> torch.Tensor:  # type: ignore[no-untyped-def]
    msgs = [{"role": "user", "content": [{"type": "image", "image": screen((200, 30, 30))}, {"type": "text", "text": "Click OK"}]}]
    text = processor.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
    enc = processor(text=[text], images=[screen((200, 30, 30))], return_tensors="pt")
    with torch.no_grad():
        return model(**enc).logits


def test_same_logits_after_save_and_reload(tiny, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    model, processor = tiny
    before = _logits(model, processor)
    assert torch.isfinite(before).all()
    out = save_model(model, processor, tmp_path / "saved", **{"provenance.json": "{}"})
    assert (out / "provenance.json").read_text() == "{}" and not list(out.glob("*.bin"))
    assert (out / "chat_template.jinja").read_text() == processor.chat_template
    assert (out / "processor_config.json").is_file() and (out / "model.safetensors").is_file()
    model2, processor2 = load_model(out, ModelSpec())
    assert torch.equal(before, _logits(model2, processor2))
    assert tiny_spec_of(out) == ModelSpec().tiny  # still recognised as tiny after training/saving


def test_load_tiny_builds_once_into_the_given_dir(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="tiny_dir"):
        load_model("tiny", ModelSpec())
    spec = ModelSpec(tiny=TinyModelSpec(num_layers=1))
    model, _ = load_model("tiny", spec, tiny_dir=tmp_path / "t")
    assert model.config.text_config.num_hidden_layers == 1 and not model.training
    stamp = (tmp_path / "t" / "model.safetensors").stat().st_mtime_ns
    load_model("tiny", spec, tiny_dir=tmp_path / "t")
    assert (tmp_path / "t" / "model.safetensors").stat().st_mtime_ns == stamp
    with pytest.raises(ValueError, match="different model.tiny"):
        load_model("tiny", ModelSpec(), tiny_dir=tmp_path / "t")


def test_loading_refuses_pickles_wrong_architecture_and_missing_dirs(tiny_dir: Path, tmp_path: Path) -> None:
    pickled = tmp_path / "pickled"
    pickled.mkdir()
    shutil.copy(tiny_dir / "config.json", pickled / "config.json")
    (pickled / "pytorch_model.bin").write_bytes(b"not loaded")
    with pytest.raises(FileNotFoundError, match="pickle weights pytorch_model.bin"):
        load_model(pickled, ModelSpec())
    with pytest.raises(ValueError, match="does not match model.architecture 'qwen2_5_vl'"):
        load_model(tiny_dir, ModelSpec(architecture="qwen2_5_vl"))
    with pytest.raises(FileNotFoundError, match="not found"):
        load_model(tmp_path / "nope", ModelSpec())


def test_loading_refuses_weights_the_config_does_not_describe(tiny_dir: Path, tmp_path: Path) -> None:
    # a config without its sizes would build the architecture's default (8B-sized) model before
    # reading a weight: refused from the headers instead, naming the file and the shapes
    from safetensors.torch import save_file

    from venus_core.models.integrity import write_manifest

    bare = tmp_path / "bare"
    bare.mkdir()
    save_file({"model.language_model.layers.0.mlp.up_proj.weight": torch.zeros(8, 4)}, str(bare / "model.safetensors"))
    (bare / "config.json").write_text('{"model_type": "qwen3_vl"}')
    write_manifest(bare)
    with pytest.raises(ValueError, match=r"no \*embed_tokens.weight tensor .* does not describe these weights"):
        load_model(bare, ModelSpec())
    other = tmp_path / "other"  # the tiny weights under a config with another vocabulary size
    shutil.copytree(tiny_dir, other)
    cfg = json.loads((other / "config.json").read_text())
    cfg["text_config"]["vocab_size"] += 8
    (other / "config.json").write_text(json.dumps(cfg))
    (other / "SHA256SUMS").unlink(missing_ok=True)
    write_manifest(other)
    with pytest.raises(ValueError, match=r"embed_tokens.weight has shape \[\d+, \d+\], but .* describes"):
        load_model(other, ModelSpec())
    load_model(tiny_dir, ModelSpec())  # a consistent checkpoint still loads


def test_pixel_limits_from_spec_and_dtype_rules(tiny_dir: Path) -> None:
    proc = load_processor(tiny_dir, 32 * 32, 64 * 64)
    enc = proc.image_processor(images=[screen((9, 9, 9), (256, 256))])
    t, h, w = (int(v) for v in enc["image_grid_thw"][0])
    assert h * w * 16 * 16 <= 64 * 64 and (h, w) == (4, 4)
    with pytest.raises(ValueError, match="min_pixels"):
        load_processor(tiny_dir, 10, 5)
    assert resolve_dtype("auto", "cpu") == torch.float32
    assert resolve_dtype("auto", "cuda") == torch.bfloat16
    assert resolve_dtype("float16", "cpu") == torch.float16
    with pytest.raises(ValueError, match="dtype"):
        resolve_dtype("int8", "cpu")


def test_bad_tiny_spec_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"model.tiny: num_heads \(3\) must be a multiple of num_kv_heads \(2\)"):
        build_tiny(TinyModelSpec(num_heads=3), tmp_path / "x")
    with pytest.raises(ValueError, match=r"image_size \(100\) must be a multiple"):
        build_tiny(TinyModelSpec(image_size=100), tmp_path / "y")


def test_stock_processor_falls_back_to_image_only_without_torchvision(
    tiny_dir: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    stock = tmp_path / "stock"
    shutil.copytree(tiny_dir, stock)
    cfg_file = stock / "processor_config.json"
    cfg = json.loads(cfg_file.read_text())
    cfg["processor_class"] = "Qwen3VLProcessor"
    cfg_file.write_text(json.dumps(cfg))
    # The stock class needs a video processor (torchvision, and a video config this dir lacks).
    proc = load_processor(stock, 1024, 4096)
    assert isinstance(proc, VenusVLProcessor) and "image-only VenusVLProcessor" in caplog.text
    assert proc.image_processor.size["longest_edge"] == 4096
