"""Checkpoint kinds for the merge benchmark: what real fine-tunes look like, seeded and generated.

Why these kinds (issue 21): dense Gaussian task vectors flatter a merge. Real bf16 fine-tunes
with small learning rates leave most entries unchanged after bf16 rounding (51-59 % of each task
vector exactly zero), with heavy-tailed magnitudes and whole rows untouched (embedding rows of
tokens never seen); parts are often frozen (a vision tower: every task vector entry zero);
checkpoints come in shards with an index file; Qwen3-VL has a vision tower, and its small
models tie the LM head to the embeddings.

Every kind is a base plus three fine-tunes (bf16 unless said otherwise). Updates are drawn in fp32
and added to the base, then the sum is rounded to bf16 once, as a bf16 optimizer step would; the
update scale of every tensor is calibrated on a sample so that the three fine-tunes leave
51 %, 55 % and 59 % of its entries unchanged ("small" and "heavy_rows" updates).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors.torch import save_file

REPO = Path(__file__).resolve().parents[2]
ZERO_TARGETS = (0.51, 0.55, 0.59)  # fraction of unchanged entries per fine-tune
ZERO_ROWS = 0.10  # heavy_rows: fraction of rows a fine-tune leaves untouched
CALIBRATION_SAMPLE = 1 << 16


@dataclass(frozen=True)
class Size:
    """Dimensions of the generated models (`small` for development, `full` for the recorded run)."""

    hidden: int
    intermediate: int
    layers: int
    vocab: int
    vl_hidden: int
    vl_intermediate: int
    vl_layers: int
    vl_vocab: int
    vision_hidden: int
    vision_depth: int


SIZES = {
    # ~0.11 G parameters per Llama checkpoint (0.22 GB bf16), ~0.2 G per Qwen3-VL one
    "small": Size(1024, 2816, 4, 32000, 1024, 3072, 2, 151936, 512, 4),
    # ~0.53 G parameters per Llama checkpoint (1.05 GB bf16, the size), ~0.6 G per Qwen3-VL
    "full": Size(2048, 5632, 9, 32000, 2048, 6144, 4, 151936, 1024, 6),
}


@dataclass(frozen=True)
class Kind:
    name: str
    layout: str  # "llama" | "qwen3vl"
    update: str  # "small" (Gaussian, calibrated zeros) | "heavy_rows" | "dense" (N(0, 0.002), no zeros)
    description: str
    frozen: tuple[str, ...] = ()  # tensor-name prefixes whose task vectors are all zero
    shards: int = 1  # >1: shards plus model.safetensors.index.json
    tied: bool = False  # qwen3vl: tie_word_embeddings (no lm_head tensor written)
    dtype: str = "bfloat16"
    frozen_in: tuple[int, ...] = (1, 2, 3)  # the fine-tunes that freeze `frozen`
    source: str | None = None  # a checkpoint (relative to the repository) whose tensors are the base
    checkpoints: tuple[str, ...] = ()  # base + fine-tunes used as they are (nothing generated)


def _frozen_layers(n: int) -> tuple[str, ...]:
    return tuple(f"model.layers.{i}." for i in range(n // 2)) + ("model.embed_tokens.",)


def kinds(size: Size) -> list[Kind]:
    vision = ("model.visual.blocks.", "model.visual.patch_embed.", "model.visual.pos_embed.")
    return [
        Kind("dense", "llama", "dense", "dense Gaussian updates N(0, 0.002), bf16 (the old benchmark's data)"),
        Kind("bf16-small", "llama", "small", "small Gaussian updates: 51/55/59 % of entries unchanged in bf16"),
        Kind("frozen", "llama", "small", "as bf16-small, the first half of the layers and the embeddings frozen "
             "(all-zero task vectors)", frozen=_frozen_layers(size.layers)),
        Kind("heavy-rows", "llama", "heavy_rows", "Student-t(3) updates scaled per row (log-normal), 10 % of rows "
             "untouched, 51/55/59 % of entries unchanged"),
        Kind("sharded", "llama", "small", "as bf16-small, every checkpoint in 3 shards with an index file", shards=3),
        Kind("qwen3vl-tied", "qwen3vl", "small", "Qwen3-VL layout (vision tower frozen, DeepStack mergers trained), "
             "tied LM head, 2 shards + index", frozen=vision, shards=2, tied=True),
        Kind("qwen3vl-untied", "qwen3vl", "heavy_rows", "Qwen3-VL layout, vision tower frozen, untied LM head, "
             "heavy-tailed row-scaled updates", frozen=vision, tied=False),
        Kind("tiny-bootstrap", "source", "dense", "the shipped venus-tiny bootstrap checkpoint (Qwen3-VL, fp32, "
             "0.8 M parameters) as base; three fp32 fine-tunes, the vision tower frozen in two (mobile, web: "
             "freeze_vision)", frozen=vision, frozen_in=(2, 3), dtype="float32",
             source="venus_core/models/assets/venus-tiny-bootstrap"),
    ]


def pipeline_kind(run_dir: Path) -> Kind:
    """The pipeline's own three specialists, as `venus run --out RUN_DIR` handed them to its merge
    stage: the mid-trained model as base; grounding's offline GRPO specialist and mobile's / web's
    online-RL specialists (offline where online RL did not run). Read from RUN_DIR/summary.json."""
    summary_path = Path(run_dir) / "summary.json"
    if not summary_path.is_file():
        raise SystemExit(f"--specialists {run_dir}: no summary.json (a `venus run --out DIR` directory)")
    summary = json.loads(summary_path.read_text())
    if summary.get("status") != "SUCCESS":
        raise SystemExit(f"{summary_path}: the run's status is {summary.get('status')!r}, not SUCCESS")
    out: dict[tuple[str, str | None], Path] = {}
    for st in summary["stages"]:
        model = (st.get("outputs") or {}).get("model")
        if model:
            out[(st["stage"], st.get("domain"))] = Path(model) / "model"
    try:
        base = out[("mid_train", None)]
        fts = [out.get(("online_rl", d)) or out[("offline_rl", d)] for d in ("grounding", "mobile", "web")]
    except KeyError as exc:
        raise SystemExit(f"{summary_path}: no model output of stage {exc.args[0]}") from None
    dtype = json.loads((base / "config.json").read_text()).get("dtype") or "float32"
    return Kind("pipeline-specialists", "run", "as-trained",
                f"the pipeline's own base and three specialists ({summary_path}; {dtype})",
                dtype=str(dtype), checkpoints=tuple(str(p) for p in (base, *fts)))


def llama_shapes(s: Size) -> dict[str, tuple[int, ...]]:
    h, i, v = s.hidden, s.intermediate, s.vocab
    kv = h // 8  # grouped-query attention: 4 of 32 heads' worth of keys and values
    out: dict[str, tuple[int, ...]] = {"model.embed_tokens.weight": (v, h), "model.norm.weight": (h,),
                                       "lm_head.weight": (v, h)}
    for n in range(s.layers):
        p = f"model.layers.{n}."
        out |= {p + "self_attn.q_proj.weight": (h, h), p + "self_attn.k_proj.weight": (kv, h),
                p + "self_attn.v_proj.weight": (kv, h), p + "self_attn.o_proj.weight": (h, h),
                p + "mlp.gate_proj.weight": (i, h), p + "mlp.up_proj.weight": (i, h),
                p + "mlp.down_proj.weight": (h, i), p + "input_layernorm.weight": (h,),
                p + "post_attention_layernorm.weight": (h,)}
    return out


def llama_config(s: Size, dtype: str) -> dict[str, object]:
    return {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": s.hidden,
            "intermediate_size": s.intermediate, "num_hidden_layers": s.layers, "num_attention_heads": 32,
            "num_key_value_heads": 4, "vocab_size": s.vocab, "max_position_embeddings": 4096,
            "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "tie_word_embeddings": False, "torch_dtype": dtype,
            "hidden_act": "silu"}


def qwen3vl_config(s: Size, tied: bool, dtype: str) -> dict[str, object]:
    """A Qwen3-VL config (the 2B model's proportions, fewer layers)."""
    heads, head_dim = s.vl_hidden // 128, 128
    return {
        "architectures": ["Qwen3VLForConditionalGeneration"], "model_type": "qwen3_vl",
        "image_token_id": 151655, "video_token_id": 151656, "vision_start_token_id": 151652,
        "vision_end_token_id": 151653, "tie_word_embeddings": tied, "dtype": dtype,
        "text_config": {
            "model_type": "qwen3_vl_text", "hidden_size": s.vl_hidden, "intermediate_size": s.vl_intermediate,
            "num_hidden_layers": s.vl_layers, "num_attention_heads": heads, "num_key_value_heads": max(1, heads // 2),
            "head_dim": head_dim, "vocab_size": s.vl_vocab, "max_position_embeddings": 32768,
            "rms_norm_eps": 1e-6, "hidden_act": "silu", "tie_word_embeddings": tied, "dtype": dtype,
            "attention_bias": False,
            "rope_parameters": {"rope_type": "default", "rope_theta": 5000000.0, "mrope_interleaved": True,
                                "mrope_section": [24, 20, 20]},
        },
        "vision_config": {
            "model_type": "qwen3_vl_vision", "depth": s.vision_depth, "hidden_size": s.vision_hidden,
            "intermediate_size": 4 * s.vision_hidden, "num_heads": s.vision_hidden // 64,
            "out_hidden_size": s.vl_hidden, "patch_size": 16, "spatial_merge_size": 2, "temporal_patch_size": 2,
            "in_channels": 3, "num_position_embeddings": 2304, "hidden_act": "gelu_pytorch_tanh",
            "deepstack_visual_indexes": _deepstack(s.vision_depth),
            "dtype": dtype,
        },
    }


def _deepstack(depth: int) -> list[int]:
    """Three DeepStack taps, as Qwen3-VL has (mergekit's qwen3_vl definition expects exactly 3)."""
    taps = sorted({max(1, depth * j // 4) for j in (1, 2, 3)})
    if len(taps) != 3 or taps[-1] >= depth:
        raise ValueError(f"a vision tower of depth {depth} has no 3 distinct DeepStack taps")
    return taps


def qwen3vl_shapes(cfg: dict[str, object], tied: bool) -> dict[str, tuple[int, ...]]:
    """Tensor names and shapes of the transformers model built from `cfg` on the meta device (no
    memory): the exact layout a Qwen3-VL checkpoint saved by transformers has. A tied head is not
    saved (transformers writes the shared tensor once, as the embeddings)."""
    from transformers import AutoConfig, AutoModelForImageTextToText

    conf = AutoConfig.for_model(**cfg)
    with torch.device("meta"):
        model = AutoModelForImageTextToText.from_config(conf)
    shapes = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    if tied:
        shapes.pop("lm_head.weight", None)
    return shapes


def _base_tensor(key: str, shape: tuple[int, ...], g: torch.Generator) -> torch.Tensor:
    if key.endswith("norm.weight") or key.endswith("norm1.weight") or key.endswith("norm2.weight") \
            or key.endswith("_norm.weight"):
        return 1.0 + 0.05 * torch.randn(shape, generator=g)
    if key.endswith(".bias"):
        return 0.01 * torch.randn(shape, generator=g)
    return 0.02 * torch.randn(shape, generator=g)


def _rows(shape: tuple[int, ...]) -> int:
    return shape[0] if len(shape) > 1 else 1


def _noise(kind: Kind, shape: tuple[int, ...], g: torch.Generator) -> torch.Tensor:
    """Unit-scale update of the kind's shape of distribution."""
    if kind.update in ("small", "dense"):
        return torch.randn(shape, generator=g)
    # heavy_rows: Student-t with 3 degrees of freedom (normal / sqrt(chi2_3 / 3)), rows scaled
    # log-normally, ZERO_ROWS of the rows untouched
    z = torch.randn(shape, generator=g)
    chi = torch.randn((3, *shape), generator=g).square_().sum(0).div_(3.0).sqrt_()
    t = z.div_(chi)
    rows = _rows(shape)
    scale = torch.exp(0.75 * torch.randn(rows, generator=g))
    scale[torch.rand(rows, generator=g) < ZERO_ROWS] = 0.0
    return t.mul_(scale.view(-1, *([1] * (len(shape) - 1))) if len(shape) > 1 else scale)


def _unchanged(base16: torch.Tensor, noise: torch.Tensor, sigma: float) -> float:
    moved = (base16.float() + sigma * noise).to(torch.bfloat16)
    return float((moved == base16).float().mean())


def calibrate(base16: torch.Tensor, noise: torch.Tensor, target: float) -> float:
    """The update scale whose bf16 rounding leaves `target` of the sampled entries unchanged."""
    flat_b, flat_n = base16.reshape(-1), noise.reshape(-1)
    if flat_b.numel() > CALIBRATION_SAMPLE:
        idx = torch.arange(CALIBRATION_SAMPLE) * (flat_b.numel() // CALIBRATION_SAMPLE)
        flat_b, flat_n = flat_b[idx], flat_n[idx]
    lo, hi = -30.0, 0.0  # log2 of the scale
    for _ in range(30):
        mid = (lo + hi) / 2
        if _unchanged(flat_b, flat_n, 2.0 ** mid) > target:
            lo = mid
        else:
            hi = mid
    return 2.0 ** ((lo + hi) / 2)


def hash_str(parts: tuple[object, ...]) -> int:
    """A seed from a tuple, stable across processes (Python's hash() of str is salted)."""
    return int.from_bytes(hashlib.sha256(repr(parts).encode()).digest()[:7], "little")


def shapes_and_config(kind: Kind, size: Size) -> tuple[dict[str, tuple[int, ...]], dict[str, object]]:
    if kind.source is not None:
        from safetensors import safe_open

        src = REPO / kind.source
        with safe_open(src / "model.safetensors", framework="pt") as h:
            shapes = {k: tuple(h.get_slice(k).get_shape()) for k in h.keys()}
        return shapes, json.loads((src / "config.json").read_text())
    if kind.layout == "llama":
        return llama_shapes(size), llama_config(size, kind.dtype)
    cfg = qwen3vl_config(size, kind.tied, kind.dtype)
    return qwen3vl_shapes(cfg, kind.tied), cfg


def _tensors(kind: Kind, shapes: dict[str, tuple[int, ...]], model: int, base_dir: Path | None
             ) -> Iterator[tuple[str, torch.Tensor]]:
    """(name, tensor) of checkpoint `model` (0 = base, 1-3 = fine-tunes; their base tensors read
    back from `base_dir`), in name order."""
    from safetensors import safe_open

    dtype = getattr(torch, kind.dtype)
    where = {}
    if model:
        assert base_dir is not None
        for f in sorted(base_dir.glob("*.safetensors")):
            with safe_open(f, framework="pt") as h:
                where |= dict.fromkeys(h.keys(), f)
    source = None if kind.source is None else REPO / kind.source / "model.safetensors"
    for key, shape in sorted(shapes.items()):
        if model == 0:
            if source is not None:
                with safe_open(source, framework="pt") as h:
                    yield key, h.get_tensor(key).to(dtype)
                continue
            yield key, _base_tensor(key, shape, torch.Generator().manual_seed(hash_str(("base", key)))).to(dtype)
            continue
        with safe_open(where[key], framework="pt") as h:
            base16 = h.get_tensor(key)
        if key.startswith(kind.frozen) and model in kind.frozen_in:
            yield key, base16
            continue
        g = torch.Generator().manual_seed(hash_str((kind.update, model, key)))
        noise = _noise(kind, shape, g)
        if kind.update == "dense":
            sigma = 0.002
        else:
            target = ZERO_TARGETS[model - 1]
            if kind.update == "heavy_rows" and len(shape) > 1:  # zero rows already leave ZERO_ROWS unchanged
                live = noise.reshape(shape[0], -1).abs().sum(1) > 0
                target = max(0.0, (target - (1.0 - float(live.float().mean()))) / max(float(live.float().mean()), 1e-9))
                sigma = calibrate(base16[live], noise[live], target) if bool(live.any()) else 0.0
            else:
                sigma = calibrate(base16, noise, target)
        yield key, noise.mul_(sigma).add_(base16.float()).to(dtype)
        del noise, base16


def write_checkpoint(path: Path, kind: Kind, shapes: dict[str, tuple[int, ...]], config: dict[str, object],
                     model: int, base_dir: Path | None = None) -> None:
    """Write one checkpoint of the kind (sharded by bytes when kind.shards > 1) and its config."""
    path.mkdir(parents=True, exist_ok=True)
    itemsize = torch.empty(0, dtype=getattr(torch, kind.dtype)).element_size()
    total = sum(math.prod(s) for s in shapes.values()) * itemsize
    budget = total / kind.shards
    shard: dict[str, torch.Tensor] = {}
    shards: list[dict[str, torch.Tensor]] = []
    size = 0
    for key, t in _tensors(kind, shapes, model, base_dir):
        if shard and size + t.numel() * itemsize > budget * 1.02 and len(shards) < kind.shards - 1:
            shards.append(shard)
            shard, size = {}, 0
        shard[key] = t.contiguous()
        size += t.numel() * itemsize
    shards.append(shard)
    if len(shards) == 1:
        save_file(shards[0], str(path / "model.safetensors"), metadata={"format": "pt"})
    else:
        weight_map = {}
        for i, sh in enumerate(shards):
            name = f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors"
            save_file(sh, str(path / name), metadata={"format": "pt"})
            weight_map |= dict.fromkeys(sh, name)
        index = {"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))}
        (path / "model.safetensors.index.json").write_text(json.dumps(index, indent=2))
    (path / "config.json").write_text(json.dumps(config, indent=1))


def generate(root: Path, kind: Kind, size: Size) -> list[Path]:
    """base + ft1..ft3 of a kind under root/<kind> (reused when complete: a `done` marker is written last);
    a kind with `checkpoints` uses those as they are."""
    if kind.checkpoints:
        dirs = [Path(p) for p in kind.checkpoints]
        missing = [str(d) for d in dirs if not list(d.glob("*.safetensors"))]
        if missing:
            raise SystemExit(f"{kind.name}: no safetensors in {missing}")
        return dirs
    work = root / kind.name
    dirs = [work / n for n in ("base", "ft1", "ft2", "ft3")]
    marker = work / "done.json"
    shapes, config = shapes_and_config(kind, size)
    spec = {"kind": dataclasses.asdict(kind), "shapes": sorted(shapes.items()), "config": config, "version": 2}
    if marker.is_file() and json.loads(marker.read_text()) == json.loads(json.dumps(spec)):
        return dirs
    for i, d in enumerate(dirs):
        for f in d.glob("*"):
            f.unlink()
        write_checkpoint(d, kind, shapes, config, i, dirs[0] if i else None)
    marker.write_text(json.dumps(spec))
    return dirs


def unchanged_fraction(base: Path, model: Path) -> float:
    """Fraction of all entries a fine-tune leaves bit-identical to the base (what the kind aims at)."""
    from safetensors import safe_open

    def files(d: Path) -> dict[str, Path]:
        out: dict[str, Path] = {}
        for f in sorted(d.glob("*.safetensors")):
            with safe_open(f, framework="pt") as h:
                out |= dict.fromkeys(h.keys(), f)
        return out

    fb, fm = files(base), files(model)
    same = n = 0
    for key, f in sorted(fb.items()):
        with safe_open(f, framework="pt") as hb, safe_open(fm[key], framework="pt") as hm:
            b, x = hb.get_tensor(key), hm.get_tensor(key)
        same += int((x.reshape(-1).view(torch.uint8).view(-1, b.element_size()) ==
                     b.reshape(-1).view(torch.uint8).view(-1, b.element_size())).all(1).sum())
        n += b.numel()
    return same / max(n, 1)
