"""Device, dtype and attention placement (`venus_core.models.placement`) and the start-up GPU check,
with CUDA faked by monkeypatching torch.cuda; and the 8B model built on the `meta` device (no memory,
no download) to show the placement logic holds for the production spec's model."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
import torch
import transformers

from venus_core.config import AgentSpec, load_spec
from venus_core.models import placement as pl
from venus_core.models.placement import DeviceError

ROOT = Path(__file__).resolve().parents[2]
SPEC_8B = ROOT / "agents" / "ui-venus-1.5-8b"


@pytest.fixture()
def gpus(monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    """`gpus(n)`: torch sees n CUDA devices (0 = none); LOCAL_RANK / WORLD_SIZE start unset."""
    monkeypatch.delenv("LOCAL_RANK", raising=False)
    monkeypatch.delenv("WORLD_SIZE", raising=False)

    def set_count(n: int) -> None:
        monkeypatch.setattr(torch.cuda, "is_available", lambda: n > 0)
        monkeypatch.setattr(torch.cuda, "device_count", lambda: n)

    set_count(0)
    return set_count


def test_auto_is_the_local_ranks_gpu_else_cuda0_else_cpu(gpus, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    assert pl.resolve_device("auto") == torch.device("cpu")
    assert pl.resolve_device(None) == torch.device("cpu")
    monkeypatch.setenv("LOCAL_RANK", "1")
    assert pl.resolve_device("auto") == torch.device("cpu")  # torchrun on CPU: gloo, every rank on the CPU
    gpus(8)
    assert pl.resolve_device("auto") == torch.device("cuda", 1)
    assert pl.resolve_device("cuda") == torch.device("cuda", 1)  # "cuda" means this rank's GPU
    monkeypatch.setenv("LOCAL_RANK", "5")
    assert pl.resolve_device("AUTO") == torch.device("cuda", 5)
    monkeypatch.delenv("LOCAL_RANK")
    assert pl.resolve_device("auto") == torch.device("cuda", 0)
    gpus(2)
    monkeypatch.setenv("LOCAL_RANK", "3")
    with pytest.raises(DeviceError, match=r"LOCAL_RANK=3 but torch sees 2 GPU\(s\)"):
        pl.resolve_device("auto")
    monkeypatch.setenv("LOCAL_RANK", "x")
    with pytest.raises(DeviceError, match="LOCAL_RANK='x' is not an integer"):
        pl.resolve_device("auto")


def test_an_explicit_device_wins_and_is_checked(gpus) -> None:  # type: ignore[no-untyped-def]
    gpus(2)
    assert pl.resolve_device("cpu") == torch.device("cpu")
    assert pl.resolve_device("cuda:1") == torch.device("cuda", 1)
    assert pl.resolve_device(torch.device("cuda", 0)) == torch.device("cuda", 0)
    assert pl.resolve_device("meta") == torch.device("meta")
    with pytest.raises(DeviceError, match=r"cuda:7 requested but torch sees 2 GPU\(s\)"):
        pl.resolve_device("cuda:7")
    with pytest.raises(DeviceError, match="device 'gpu0'"):
        pl.resolve_device("gpu0")
    gpus(0)
    with pytest.raises(DeviceError, match=r"CUDA device requested but none is usable: .*is_available\(\)=False"):
        pl.resolve_device("cuda")


def test_dtype_auto_is_bf16_on_gpu_for_inference_and_fp32_master_weights_for_training() -> None:
    cuda, cpu = torch.device("cuda", 0), torch.device("cpu")
    assert pl.resolve_dtype("auto", cuda) == torch.bfloat16
    assert pl.resolve_dtype("auto", cpu) == torch.float32
    assert pl.resolve_dtype("auto", cuda, training=True) == torch.float32
    assert pl.resolve_dtype("bfloat16", cpu) == torch.bfloat16
    assert pl.resolve_dtype("bfloat16", cuda, training=True) == torch.bfloat16  # explicit: kept
    with pytest.raises(ValueError, match="model.dtype must be one of"):
        pl.resolve_dtype("int8", cpu)


def test_flash_attention_only_on_cuda_in_half_precision_when_importable(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    cuda = torch.device("cuda", 0)
    monkeypatch.setattr(pl, "flash_attn_importable", lambda: True)
    assert pl.resolve_attention("flash_attention_2", cuda, torch.bfloat16) == "flash_attention_2"
    with caplog.at_level(logging.WARNING, logger="venus_core.models.placement"):
        assert pl.resolve_attention("flash_attention_2", "cpu", torch.bfloat16) == "sdpa"
        assert pl.resolve_attention("flash_attention_2", cuda, torch.float32) == "sdpa"
        monkeypatch.setattr(pl, "flash_attn_importable", lambda: False)
        assert pl.resolve_attention("flash_attention_2", cuda, torch.bfloat16) == "sdpa"
    notes = [r.getMessage() for r in caplog.records]
    assert len(notes) == 3 and all("using sdpa because" in n for n in notes)
    assert "not a GPU" in notes[0] and "float32" in notes[1] and "flash_attn package" in notes[2]
    assert pl.resolve_attention("sdpa", cuda, torch.bfloat16) == "sdpa"
    assert pl.resolve_attention("eager", "cpu", torch.float32) == "eager"


def test_the_8b_spec_asks_for_gpus_per_stage_and_the_tiny_spec_for_none() -> None:
    spec = load_spec(SPEC_8B)
    asked = {stage: pl.gpus_requested(spec, stage) for stage in pl.GPU_STAGES}
    assert asked == {"generate_data": 0, "score_data": 0, "mid_train": 8, "offline_rl": 8, "online_rl": 8, "merge": 0, "evaluate": 1}
    assert {pl.gpus_requested(AgentSpec(), s) for s in pl.GPU_STAGES} == {0}
    with pytest.raises(ValueError, match="no platform.resources entry"):
        pl.gpus_requested(spec, "serve")


def test_startup_check_fails_fast_naming_stage_request_and_what_is_there(
        gpus, caplog: pytest.LogCaptureFixture) -> None:  # type: ignore[no-untyped-def]
    spec = load_spec(SPEC_8B)
    with pytest.raises(DeviceError) as err:
        pl.job_device(spec, "offline_rl")
    msg = str(err.value)
    assert msg.startswith("offline_rl: the spec asks for 8 GPU(s) per pod (platform.resources.offline_rl.gpu_count) "
                          "but torch sees 0 (torch ")
    assert "--device cpu" in msg and "--set platform.resources.offline_rl.gpu_count=0" in msg
    gpus(4)
    with pytest.raises(DeviceError, match=r"online_rl: the spec asks for 8 GPU\(s\) .* torch sees 4"):
        pl.job_device(spec, "online_rl")
    assert pl.job_device(spec, "evaluate") == torch.device("cuda", 0)
    gpus(8)
    assert pl.job_device(spec, "offline_rl") == torch.device("cuda", 0)
    gpus(0)
    with caplog.at_level(logging.WARNING, logger="venus_core.models.placement"):
        assert pl.job_device(spec, "offline_rl", "cpu") == torch.device("cpu")  # on purpose: allowed, noted
    assert "gives this stage 8 GPU(s) but --device cpu" in caplog.text
    # the embedded tiny spec asks for none: nothing changes on a CPU machine
    assert pl.job_device(AgentSpec(), "offline_rl") == torch.device("cpu")
    with pytest.raises(DeviceError, match="mid_train: the spec asks for 8"):
        pl.check_gpus("mid_train", 8, visible=7)
    pl.check_gpus("mid_train", 8, visible=8)
    pl.check_gpus("merge", 0, visible=0)


def test_the_offline_rl_job_refuses_to_start_without_the_specs_gpus(
        gpus, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:  # type: ignore[no-untyped-def]
    from venus_core.runtime import offline_rl

    code = offline_rl.main(["--spec", str(SPEC_8B), "--domain", "grounding", "--model", str(tmp_path / "absent"),
                            "--data", str(tmp_path / "absent-data"), "--out", str(tmp_path / "out")])
    assert code == 2
    assert "offline_rl: error: offline_rl: the spec asks for 8 GPU(s)" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()  # nothing read or written before the check


def test_reference_copy_takes_the_next_gpu_only_in_one_process_on_a_multi_gpu_node(
        gpus, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    cuda0 = torch.device("cuda", 0)
    assert pl.reference_device(torch.device("cpu")) == torch.device("cpu")
    gpus(1)
    assert pl.reference_device(cuda0) == cuda0
    gpus(8)
    assert pl.reference_device(cuda0) == torch.device("cuda", 1)
    assert pl.reference_device(torch.device("cuda", 7)) == cuda0
    monkeypatch.setenv("WORLD_SIZE", "8")  # torchrun: one process per GPU keeps its reference with it
    assert pl.reference_device(torch.device("cuda", 3)) == torch.device("cuda", 3)


def test_low_precision_training_is_noted_where_updates_round_away(caplog: pytest.LogCaptureFixture) -> None:
    bf16 = torch.nn.Linear(4, 4).to(torch.bfloat16)
    with caplog.at_level(logging.WARNING, logger="venus_core.models.placement"):
        note = pl.low_precision_note(bf16, 4e-7, "offline_rl.grounding")
    assert note is not None and "bfloat16" in note and "lr=4e-07" in note and note in caplog.text
    assert pl.low_precision_note(bf16, 1e-3, "x") is None
    assert pl.low_precision_note(torch.nn.Linear(4, 4), 4e-7, "x") is None
    # the fp32 master-weights arithmetic: a 4e-7 step survives in float32 ...
    w = torch.tensor(0.02)
    assert float(w - 4e-7) != float(w)
    # ... and is lost in bfloat16
    wb = torch.tensor(0.02, dtype=torch.bfloat16)
    assert torch.equal(wb - torch.tensor(4e-7, dtype=torch.bfloat16), wb)


def qwen3_vl_8b_config() -> transformers.Qwen3VLConfig:
    """Qwen/Qwen3-VL-8B-Instruct's architecture (its public config.json, hard-coded: no download)."""
    return transformers.Qwen3VLConfig(
        text_config=dict(
            vocab_size=151936, hidden_size=4096, intermediate_size=12288, num_hidden_layers=36,
            num_attention_heads=32, num_key_value_heads=8, head_dim=128, max_position_embeddings=262144,
            rms_norm_eps=1e-6, hidden_act="silu", tie_word_embeddings=False,
            rope_parameters={"rope_type": "default", "rope_theta": 5_000_000.0, "mrope_section": [24, 20, 20],
                             "mrope_interleaved": True},
        ),
        vision_config=dict(
            depth=27, hidden_size=1152, intermediate_size=4304, num_heads=16, patch_size=16, spatial_merge_size=2,
            temporal_patch_size=2, out_hidden_size=4096, num_position_embeddings=2304,
            deepstack_visual_indexes=[8, 16, 24], hidden_act="gelu_pytorch_tanh", in_channels=3,
        ),
        image_token_id=151655, video_token_id=151656, vision_start_token_id=151652, vision_end_token_id=151653,
        tie_word_embeddings=False,
    )


def test_the_8b_model_placed_as_the_spec_says_built_on_meta(gpus, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    spec = load_spec(SPEC_8B)
    gpus(8)
    monkeypatch.setenv("LOCAL_RANK", "2")
    monkeypatch.setattr(pl, "flash_attn_importable", lambda: True)
    place = pl.placement_for(spec.model, "auto")
    assert place.to_dict() == {"device": "cuda:2", "dtype": "bfloat16", "attn_implementation": "flash_attention_2"}
    train_place = pl.placement_for(spec.model, "auto", training=True)
    assert train_place.dtype == torch.bfloat16  # the 8B spec says bfloat16 explicitly: kept, and noted below
    # the same model, built from its config without allocating (transformers would check the flash_attn
    # package at build time, which this machine lacks, so the meta build uses sdpa; the kernel choice
    # is the placement's, asserted above)
    with torch.device("meta"):
        model = transformers.AutoModelForImageTextToText.from_config(
            qwen3_vl_8b_config(), dtype=place.dtype, attn_implementation="sdpa")
    assert type(model).__name__ == "Qwen3VLForConditionalGeneration"
    params = list(model.parameters())
    n = sum(p.numel() for p in params)
    assert n == 8_767_123_696  # Qwen3-VL-8B: 8.77 B parameters
    assert {p.device.type for p in params} == {"meta"} and {p.dtype for p in params} == {torch.bfloat16}
    assert pl.describe_model(model) == {"device": "meta", "dtype": "bfloat16", "attn_implementation": "sdpa",
                                        "cuda_devices": 8}
    # memory: weights 17.5 GB in bf16; with gradients and AdamW's two moments 70 GB before activations,
    # so the GRPO reference goes on the next GPU of the 8-GPU pod while the learner runs in one process
    weight_gb = n * 2 / 1e9
    assert 17.4 < weight_gb < 17.6 and 4 * weight_gb > 69
    assert pl.reference_device(place.device) == torch.device("cuda", 3)
    # AdamW at the spec's offline RL lr on these bf16 weights would round its updates away: noted
    note = pl.low_precision_note(model, spec.offline_rl.grounding.lr, "offline_rl.grounding")
    assert note is not None and "round away" in note
    # the tiny spec on this machine: CPU, float32, sdpa, no GPU asked for
    gpus(0)
    monkeypatch.delenv("LOCAL_RANK")
    assert pl.placement_for(AgentSpec().model).to_dict() == {"device": "cpu", "dtype": "float32",
                                                            "attn_implementation": "sdpa"}
