"""What the sections share: the seeded Qwen2.5-VL model(s) with random weights, the real processor
with an offline tokenizer, FinMME-like items, `finbench run`'s own settings for this device, and
one `run` of the benchmark loop (per-run reports off unless `--run-reports`)."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import gc
import io
import time
from pathlib import Path
from typing import Any, Iterator

QWEN_MIN_PIXELS, QWEN_MAX_PIXELS = 56 * 56, 28 * 28 * 16384  # the released processor's limits
TINY_OVERRIDES = {"layers": 2, "hidden_size": 64, "vision_depth": 2, "vocab_size": 448}
TINY_VISION_MLP = 107  # 3420 / 32: no multiple of 64, as the published width is none of 16 bytes


def build_processor(work: Path, tiny: bool) -> Any:
    """The real Qwen2.5-VL processor classes with a small offline tokenizer; full-size pixel
    limits so a 1024×768 chart becomes 999 image tokens as with the released model."""
    from transformers import AutoProcessor

    from finbench.offline.tiny import make_tiny

    processor = AutoProcessor.from_pretrained(make_tiny("qwen2.5-vl", work / "processor"))
    if not tiny:
        processor.image_processor.size = {"shortest_edge": QWEN_MIN_PIXELS, "longest_edge": QWEN_MAX_PIXELS}
    return processor


def model_config(name: str, tokenizer: Any, tiny: bool) -> Any:
    """Published full-size config (or its scaled-down twin) with special tokens remapped."""
    from finbench.offline.shapes import full_size_config, scaled_down

    config = full_size_config(name)
    for key, token in [("image_token_id", "<|image_pad|>"), ("video_token_id", "<|video_pad|>"),
                       ("vision_start_token_id", "<|vision_start|>"), ("vision_end_token_id", "<|vision_end|>")]:
        setattr(config, key, tokenizer.convert_tokens_to_ids(token))
    config.text_config.bos_token_id = config.text_config.eos_token_id = tokenizer.convert_tokens_to_ids("<|im_end|>")
    if not tiny:
        return config
    config = scaled_down(config, **TINY_OVERRIDES)
    config.vision_config.intermediate_size = TINY_VISION_MLP  # misaligned like the 7B's 3420: padded to 128
    return config


def make_items(path: Path, n_items: int, image_size: tuple[int, int], tokenizer: Any, text_tokens: int) -> Path:
    """FinMME-format parquet: synthetic charts upscaled to `image_size`, related sentences padded
    so the prompt text has about `text_tokens` tokens, replicated to `n_items` distinct ids."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    from PIL import Image

    from finbench.offline.finmme_synthetic import generate_items

    base = generate_items(n_items=min(n_items, 64), seed=0)
    filler = " Analysts attribute the change to funding costs, currency moves and seasonal demand."
    records = []
    for copy in range((n_items + len(base) - 1) // len(base)):
        for item in base:
            if len(records) == n_items:
                break
            record = {k: v for k, v in item.items() if not k.startswith("_")}
            image = Image.open(io.BytesIO(item["image"]["bytes"])).convert("RGB").resize(image_size, Image.BICUBIC)
            # each copy its own request: a copy equal to another is answered from the first (the same
            # prompt and image bytes, the same key), which once made 7 of 8 rows free on the H200
            image.paste((copy % 256, copy // 256 % 256, 255), (0, 0, 16, 16))
            buffer = io.BytesIO()
            image.save(buffer, format="JPEG", quality=90)
            sentences = record["related_sentences"]
            while len(tokenizer(record["question_text"] + sentences + record["verified_caption"])["input_ids"]) < text_tokens - 60:
                sentences += filler
            record.update(id=f"{item['id']}-{copy}", image={"bytes": buffer.getvalue(), "path": f"{item['id']}.jpg"},
                          related_sentences=f"{sentences} (Filing {copy + 1}.)")
            records.append(record)
    pq.write_table(pa.Table.from_pylist(records), path)
    return path


def _free() -> None:
    import torch

    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def run_settings(args: argparse.Namespace) -> dict[str, Any]:
    """Batch size, token budget and workers: what was given, else `finbench run`'s defaults for this
    device and machine (runner/defaults.py `run_defaults`, the function the CLI calls)."""
    from finbench.runner.defaults import run_defaults

    sized = run_defaults(args.device)
    batch = sized["batch_size"] if args.batch_size is None else None if args.batch_size == "auto" else int(args.batch_size)
    return {"batch_size": batch, "token_budget": sized["token_budget"] if args.token_budget is None else args.token_budget,
            "workers": sized["workers"] if args.workers is None else args.workers}


class Check:
    """Everything the sections share: the seeded model(s), adapters, data and the run settings."""

    def __init__(self, args: argparse.Namespace, work: Path) -> None:
        self.args, self.work = args, work
        self.settings = run_settings(args)
        self.paths = self._default_paths()
        self.models: dict[str, Any] = {}
        self.reference_samples: Any = None

    def _default_paths(self) -> Any:
        from finbench.models.fast_paths import FastPaths

        return FastPaths.everywhere() if self.args.tiny else FastPaths()  # the tiny check takes the CUDA paths

    def build(self) -> dict[str, Any]:
        import torch

        from finbench.offline.shapes import build_random_model

        self.processor = build_processor(self.work, self.args.tiny)
        image_size = (224, 168) if self.args.tiny else (1024, 768)
        n_data = max(self.args.n_items, self.args.ab_items, self.args.baseline_items + 1)
        self.data = make_items(self.work / "items.parquet", n_data, image_size, self.processor.tokenizer,
                               self.args.text_tokens)
        self.config = model_config(self.args.model, self.processor.tokenizer, self.args.tiny)
        self.dtype = torch.float32 if self.args.tiny else torch.bfloat16
        started = time.perf_counter()
        self.models["padded"] = build_random_model(self.config, dtype=self.dtype, device=self.args.device,
                                                   seed=self.args.seed)
        self.load_s = time.perf_counter() - started
        return {"settings": self.settings, "fast_paths": dataclasses.asdict(self.paths), "items": n_data,
                "load_s": self.load_s, "parameters": sum(p.numel() for p in self.models["padded"].parameters()),
                "note": "load_s builds random weights on the device; a checkpoint read from disk takes longer "
                        "(the quantized A/B rows load one and record it)"}

    def unpadded_model(self) -> Any:
        """A second copy of the same seeded weights, never padded (the reference and no-pad rows)."""
        from finbench.offline.shapes import build_random_model

        if "unpadded" not in self.models:
            self.models["unpadded"] = build_random_model(self.config, dtype=self.dtype, device=self.args.device,
                                                         seed=self.args.seed)
        return self.models["unpadded"]

    def adapter(self, paths: Any, model: Any = None) -> Any:
        """An adapter over the padded model (padded in place by the first) or over `model`."""
        from finbench.models.qwen2_5_vl import Qwen25VL

        adapter = Qwen25VL(model if model is not None else self.models["padded"], self.processor,
                           f"random:{self.args.model}", fast_paths=paths)
        if model is None:  # later adapters find the widths padded already: report what the first did
            self.padded_widths = getattr(self, "padded_widths", None) or adapter.padded_widths
            adapter.padded_widths = self.padded_widths if adapter.fast.pad_widths else {}
        return adapter

    def run_config(self, name: str, n_items: int, **changes: Any) -> Any:
        from finbench.config.specs import RunConfig

        return RunConfig.flat(model=f"random:{self.args.model}", data=str(self.data), limit=n_items, bootstrap=0,
                         out=str(self.work / f"run-{name}"), **self.settings, **changes)

    def run(self, adapter: Any, name: str, n_items: int, **changes: Any) -> Any:
        from finbench.runner.engine import run_benchmark

        with without_reports() if self.args.no_run_reports else contextlib.nullcontext():
            return run_benchmark(self.run_config(name, n_items, **changes), adapter, show_progress=False)


@contextlib.contextmanager
def without_reports() -> Iterator[None]:
    """The check's own runs write no report.html / report.md (`--no-run-reports`, gpu_check.sh's
    setting): nobody reads them, and rendering a run's plots is ~90% of a tiny run on 2 CPU cores
    (seconds each, dozens of runs). Their samples and results are written as ever; the timed part
    of a run ends before its outputs."""
    from finbench.report import html

    real = html.write_report
    html.write_report = lambda folder, *args, **kwargs: None  # runner/outputs.py imports it per call
    try:
        yield
    finally:
        html.write_report = real


