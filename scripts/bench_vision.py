"""Vision-tower attention without flash-attn: stock transformers (one SDPA call per window or image)
vs finbench's packed attention (models/vision_attention.py, one call per layer).

For Qwen2.5-VL-7B's and Qwen3-VL-8B's published vision towers (width, heads, patch / merge /
window geometry; depth reduced, random weights) on N charts of W×H pixels, in fp32:
1. attention calls per vision layer per batch, counted on `torch.nn.functional.scaled_dot_product_attention`
   (both paths go through it) with a per-block hook, for windowed and full-attention layers;
2. the largest difference between the two towers' outputs;
3. wall time of the tower and of its attention modules (qkv, rotary, attention, proj), best of
   --repeat, and the ratio stock / packed.

Counting runs on the full-width tower and the same forward is timed. On a CPU the towers' matmuls
dominate (they are the same on both paths), so the tower ratio is small there; the call count is
what a GPU pays for in kernel launches and Python. On CUDA in bf16 the packed path runs PyTorch's
variable-length kernel (counted as calls too), and a third variant, "packed-padded", forces the
padded single-SDPA path so the two one-call implementations can be compared; timings synchronise.
With --compile, the packed tower is timed once more with its blocks compiled (`--compile-vision`,
models/compile.py), after everything else.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import time
from collections import defaultdict
from typing import Any

import torch

from finbench.models import vision_attention as va

# Qwen/Qwen3-VL-8B-Instruct config.json, vision_config (architecture keys)
QWEN3_VL_8B_VISION = {"depth": 27, "hidden_act": "gelu_pytorch_tanh", "hidden_size": 1152, "in_channels": 3,
                      "intermediate_size": 4304, "num_heads": 16, "num_position_embeddings": 2304,
                      "out_hidden_size": 4096, "patch_size": 16, "spatial_merge_size": 2,
                      "temporal_patch_size": 2, "deepstack_visual_indexes": [8, 16, 24]}


def build_tower(family: str, depth: int) -> tuple[torch.nn.Module, int, int]:
    """(tower, patch pixels·channels, resize factor) at the published width with `depth` layers."""
    torch.manual_seed(0)
    if family == "qwen2.5-vl":
        from transformers.models.qwen2_5_vl.modeling_qwen2_5_vl import Qwen2_5_VisionTransformerPretrainedModel

        from finbench.offline.shapes import full_size_config

        config = full_size_config("qwen2.5-vl-7b").vision_config
        published = list(config.fullatt_block_indexes)  # [7, 15, 23, 31]: one full layer per 8
        depth = depth or config.depth
        config.depth = depth
        config.fullatt_block_indexes = [i for i in published if i < depth] or [depth - 1]
        config._attn_implementation = "sdpa"
        return Qwen2_5_VisionTransformerPretrainedModel._from_config(config).eval(), 3 * 2 * 14 * 14, 28
    if family == "qwen3-vl":
        from transformers.models.qwen3_vl.configuration_qwen3_vl import Qwen3VLVisionConfig
        from transformers.models.qwen3_vl.modeling_qwen3_vl import Qwen3VLVisionModel

        depth = depth or QWEN3_VL_8B_VISION["depth"]
        settings = dict(QWEN3_VL_8B_VISION, depth=depth,
                        deepstack_visual_indexes=[i for i in QWEN3_VL_8B_VISION["deepstack_visual_indexes"]
                                                  if i < depth] or [0])
        config = Qwen3VLVisionConfig(**settings)
        config._attn_implementation = "sdpa"
        return Qwen3VLVisionModel._from_config(config).eval(), 3 * 2 * 16 * 16, 32
    raise ValueError(f"unknown family {family!r}")


def chart_grid(width: int, height: int, factor: int) -> list[int]:
    """Patch grid (t, h, w) of one chart under the processor's resize rule (within the default pixel range)."""
    from transformers.models.qwen2_vl.image_processing_qwen2_vl import smart_resize

    h, w = smart_resize(height, width, factor=factor, min_pixels=56 * 56, max_pixels=16384 * 28 * 28)
    patch = factor // 2
    return [1, h // patch, w // patch]


class _Counter:
    """SDPA calls per vision block, via a wrapper on the functional and pre-hooks on the blocks."""

    def __init__(self, tower: torch.nn.Module) -> None:
        self.calls = 0
        self.per_block: dict[int, int] = defaultdict(int)
        self.attention_s = 0.0
        self._current = -1
        self._original = torch.nn.functional.scaled_dot_product_attention
        self._handles = []
        for index, block in enumerate(tower.blocks):
            self._handles.append(block.register_forward_pre_hook(self._enter(index)))
            self._handles.append(block.attn.register_forward_pre_hook(self._start))
            self._handles.append(block.attn.register_forward_hook(self._stop))

    def _enter(self, index: int) -> Any:
        def hook(module: Any, args: Any) -> None:
            self._current = index
        return hook

    def _start(self, module: Any, args: Any) -> None:
        _sync()
        self._started = time.perf_counter()

    def _stop(self, module: Any, args: Any, output: Any) -> None:
        _sync()
        self.attention_s += time.perf_counter() - self._started

    def __enter__(self) -> "_Counter":
        def counting(*args: Any, **kwargs: Any) -> torch.Tensor:
            self.per_block[self._current] += 1
            return self._original(*args, **kwargs)

        def counting_varlen(*args: Any, **kwargs: Any) -> torch.Tensor | None:
            out = self._original_varlen(*args, **kwargs)
            self.per_block[self._current] += out is not None
            return out

        torch.nn.functional.scaled_dot_product_attention = counting
        self._original_varlen, va._varlen = va._varlen, counting_varlen
        return self

    def __exit__(self, *exc: Any) -> None:
        torch.nn.functional.scaled_dot_product_attention = self._original
        va._varlen = self._original_varlen
        for handle in self._handles:
            handle.remove()


class _Holder(torch.nn.Module):
    def __init__(self, tower: torch.nn.Module) -> None:
        super().__init__()
        self.config = type("Config", (), {"vision_config": tower.config})()
        self.visual = tower


def _sync() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


class _NoVarlen:
    """Forces the padded single-SDPA path (the CUDA variant "packed-padded")."""

    def __enter__(self) -> None:
        self._usable, va._varlen_usable = va._varlen_usable, lambda query: False

    def __exit__(self, *exc: Any) -> None:
        va._varlen_usable = self._usable


def tower_time(tower: torch.nn.Module, pixels: torch.Tensor, grid: torch.Tensor, repeat: int) -> tuple[float, torch.Tensor]:
    """Best-of-`repeat` wall time of the tower's forward, synchronised, and its output."""
    best, output = math.inf, None
    for _ in range(repeat):
        with torch.inference_mode():
            _sync()
            started = time.perf_counter()
            output = tower(pixels, grid_thw=grid).pooler_output
            _sync()
        best = min(best, time.perf_counter() - started)
    return best, output


def run(tower: torch.nn.Module, pixels: torch.Tensor, grid: torch.Tensor, repeat: int,
        padded: bool = False) -> dict[str, Any]:
    """`tower_time` under the call counter (per-block hooks: not for a compiled tower)."""
    best = {"tower_s": math.inf, "attention_s": math.inf}
    output, per_block = None, {}
    for _ in range(repeat):
        with _Counter(tower) as counter, (_NoVarlen() if padded else contextlib.nullcontext()):
            elapsed, output = tower_time(tower, pixels, grid, 1)
        best["tower_s"] = min(best["tower_s"], elapsed)
        best["attention_s"] = min(best["attention_s"], counter.attention_s)
        per_block = dict(counter.per_block)
    return {**best, "output": output, "per_block": per_block}


def compiled_variant(tower: torch.nn.Module, pixels: torch.Tensor, grid: torch.Tensor, repeat: int,
                     packed: dict[str, Any]) -> str:
    """`--compile-vision` on top of the packed path: compile + first call on one chart, then the
    batch timed like the others, and its largest difference from the eager packed tower."""
    from finbench.models.compile import compile_vision_blocks

    compiled = compile_vision_blocks(tower)
    first = int(grid[0].prod())
    compile_s, _ = tower_time(tower, pixels[:first], grid[:1], 1)
    tower_time(tower, pixels, grid, 1)  # a dynamic-shape recompile, if any, is not timed
    seconds, output = tower_time(tower, pixels, grid, repeat)
    diff = (output.float() - packed["output"].float()).abs().max().item()
    return (f"packed+compiled ({', '.join(f'{k} x{v}' for k, v in compiled.items())}): tower {seconds * 1e3:.1f} ms "
            f"vs packed {packed['tower_s'] * 1e3:.1f} ms, ratio packed/compiled {packed['tower_s'] / seconds:.2f}x; "
            f"compile + first call {compile_s:.1f} s; max |compiled - packed| = {diff:.2e}")


def patch_embed_times(patch_embed: torch.nn.Module, pixels: torch.Tensor, repeat: int) -> tuple[float, float, float]:
    """(Conv3d seconds, GEMM seconds, max |difference|) of the patch embedding alone, best of `repeat`."""
    conv = patch_embed.proj
    shape = (-1, conv.in_channels, *conv.kernel_size)
    best = {"conv": math.inf, "gemm": math.inf}
    outputs = {}
    with torch.inference_mode():
        for round_ in range(repeat + 1):  # round 0 warms up (cuDNN algorithm choice)
            for name, fn in (("conv", lambda: conv(pixels.view(shape)).view(pixels.shape[0], -1)),
                             ("gemm", lambda: va.patchify_linear(pixels, conv))):
                _sync()
                started = time.perf_counter()
                outputs[name] = fn()
                _sync()
                if round_:
                    best[name] = min(best[name], time.perf_counter() - started)
    return best["conv"], best["gemm"], (outputs["conv"].float() - outputs["gemm"].float()).abs().max().item()


def layer_kinds(tower: torch.nn.Module) -> dict[str, list[int]]:
    full = set(getattr(tower.config, "fullatt_block_indexes", None) or range(len(tower.blocks)))
    kinds = {"windowed": [i for i in range(len(tower.blocks)) if i not in full],
             "full-attention": [i for i in range(len(tower.blocks)) if i in full]}
    return {k: v for k, v in kinds.items() if v}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--families", nargs="+", default=["qwen2.5-vl", "qwen3-vl"])
    parser.add_argument("--charts", type=int, default=16)
    parser.add_argument("--width", type=int, default=1024)
    parser.add_argument("--height", type=int, default=768)
    parser.add_argument("--depth", type=int, default=2, help="vision layers (0: the published 32 / 27)")
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    parser.add_argument("--compile", action="store_true", help="also time the packed tower with its blocks "
                        "compiled (--compile-vision), last")
    args = parser.parse_args()
    dtype = getattr(torch, args.dtype)
    if dtype == torch.float32:  # CUDA's cuDNN convolutions default to TF32: fp32 means fp32 here
        torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = False
    print(f"torch {torch.__version__}, device {args.device}, {args.dtype}, threads {torch.get_num_threads()}; "
          f"{args.charts} charts of {args.width}x{args.height}, vision depth {args.depth}")
    for family in args.families:
        tower, patch_width, factor = build_tower(family, args.depth)
        tower = tower.to(args.device, dtype)
        grid = torch.tensor([chart_grid(args.width, args.height, factor)] * args.charts, device=args.device)
        torch.manual_seed(1)
        pixels = torch.randn(int(grid.prod(-1).sum()), patch_width, device=args.device, dtype=dtype)
        holder = _Holder(tower)
        for mode in (va.STOCK, va.PACKED):  # warm-up on one chart: threads, allocator, first-call costs
            va.install(holder, "sdpa", mode)
            run(tower, pixels[: int(grid[0].prod())], grid[:1], 1)
        va.install(holder, "sdpa", va.STOCK)
        stock = run(tower, pixels, grid, args.repeat)
        va.install(holder, "sdpa", va.PACKED)
        packed = run(tower, pixels, grid, args.repeat)
        va.install(holder, "sdpa", va.STOCK)
        diff = (stock["output"].float() - packed["output"].float()).abs().max().item()
        print(f"[{family}] grid per chart {grid[0].tolist()} ({int(grid[0].prod())} patches), "
              f"{pixels.shape[0]} patches in the batch, max |stock - packed| = {diff:.2e}")
        for kind, layers in layer_kinds(tower).items():
            packed_calls = {packed["per_block"].get(i, 0) for i in layers}
            stock_calls = {stock["per_block"].get(i, 0) for i in layers}
            print(f"[{family}] {kind} layers: calls per layer: {'/'.join(map(str, sorted(packed_calls)))} "
                  f"(stock: {'/'.join(map(str, sorted(stock_calls)))})")
        print(f"[{family}] tower wall time: stock {stock['tower_s']:.4g} s, packed {packed['tower_s']:.4g} s, "
              f"ratio stock/packed {stock['tower_s'] / packed['tower_s']:.2f}x")
        print(f"[{family}] attention modules (qkv, rotary, attention, proj): stock {stock['attention_s']:.4g} s, "
              f"packed {packed['attention_s']:.4g} s, ratio {stock['attention_s'] / packed['attention_s']:.2f}x")
        conv_s, gemm_s, diff = patch_embed_times(tower.patch_embed, pixels, args.repeat)
        print(f"[{family}] patch embedding (part of the packed path): Conv3d {conv_s * 1e3:.2f} ms, "
              f"GEMM {gemm_s * 1e3:.2f} ms, ratio {conv_s / gemm_s:.1f}x, max |diff| = {diff:.2e}")
        if va._varlen_usable(pixels.new_empty(1, 1, 1)):  # CUDA half precision: also time the padded path
            va.install(holder, "sdpa", va.PACKED)
            padded = run(tower, pixels, grid, args.repeat, padded=True)
            va.install(holder, "sdpa", va.STOCK)
            diff = (padded["output"].float() - packed["output"].float()).abs().max().item()
            calls = {padded["per_block"].get(i, 0) for i in range(len(tower.blocks))}
            print(f"[{family}] packed-padded (single SDPA): calls per layer: {'/'.join(map(str, sorted(calls)))}, "
                  f"tower {padded['tower_s'] * 1e3:.1f} ms vs varlen {packed['tower_s'] * 1e3:.1f} ms vs stock "
                  f"{stock['tower_s'] * 1e3:.1f} ms; max |padded - varlen| = {diff:.2e}")
        if args.compile:
            va.install(holder, "sdpa", va.PACKED)
            try:
                line = compiled_variant(tower, pixels, grid, args.repeat, packed)
            except Exception as err:  # noqa: BLE001 — e.g. no compiler: the other figures stand
                line = f"packed+compiled: failed ({type(err).__name__}: {str(err).splitlines()[0][:200]})"
            print(f"[{family}] {line}", flush=True)


if __name__ == "__main__":
    main()
