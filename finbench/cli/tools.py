"""`finbench data check`, `finbench models make-tiny`, `finbench models list` and `finbench
benchmarks`: the utilities around a run."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from finbench.app.datacheck import check_data, print_check
from finbench.benchmarks import all_benchmarks, data_option_names, describe
from finbench.cli.common import fail, one_line_errors, out_console
from finbench.config.options import with_options
from finbench.config.run_options import OPTIONS
from finbench.core.types import DEFAULT_BENCHMARK
from finbench.offline.like import make_tiny_like
from finbench.offline.tiny import TINY_FAMILIES, make_tiny
from finbench.offline.tiny_quant import TINY_QUANT_FORMATS, make_tiny_quantized


@with_options(lambda: [OPTIONS[name] for name in data_option_names()])  # --spec, --image-root: as `run` reads them
def data_check(
    path: str = typer.Argument(..., help="A local copy of the data (file or folder), or a hub id in the local "
                               "Hugging Face cache."),
    benchmark: str = typer.Option(DEFAULT_BENCHMARK, help="Benchmark whose format the data is in."),
    options: dict = None,
) -> None:
    """Validate a benchmark's data without a model: every record's fields, every image, and the
    counts per split, task or domain and question type; for a file of your own (--benchmark custom),
    the schema it resolved, three rendered prompts and every problem by row. Exit code 0: clean;
    1: some records or images would be per-sample errors (a custom file: rows a run refuses); 2:
    the data cannot be read at all."""
    with one_line_errors():
        report = check_data(benchmark, path, options)
    print_check(report, out_console)
    if not report["ok"]:
        raise typer.Exit(1)


class MakeTinyCommand(typer.core.TyperCommand):
    """`make-tiny --help` lists the families the offline builders know (finbench/offline/tiny.py,
    torch-free until a build starts), added to the help text when help is asked for."""

    def format_help(self, ctx, formatter) -> None:
        if "Families:" not in (self.help or ""):
            self.help = f"{self.help}\n\nFamilies: {', '.join(TINY_FAMILIES)}."
        super().format_help(ctx, formatter)


def make_tiny_command(
    family: str = typer.Argument(..., help="Architecture, one of the families listed above, e.g. qwen2.5-vl."),
    out_dir: Path = typer.Argument(..., help="Folder to write the model into."),
    seed: int = typer.Option(0, help="Weight seed."),
    thinking: bool = typer.Option(False, help="A thinking checkpoint: the chat template opens <think> (Qwen3-VL)."),
    force: bool = typer.Option(False, help="Write into a folder that already holds files."),
    head_dim: int = typer.Option(16, help="Attention head size of the text and vision layers (qwen2.5-vl, qwen3-vl): "
                                 "32 for vLLM's CPU backend, which runs head sizes 32, 64, 80, ... (docs/scale.md)."),
    quant: Optional[str] = typer.Option(None, help="Kernel-friendly widths (multiples of 128) in a quantization "
                                        "format's own layout: bf16 (for on-the-fly --quant), fp8-block128, bnb-8bit, "
                                        "bnb-4bit, torchao-int8wo, compressed-tensors-w8a16, awq-4bit, gptq-4bit."),
    like: Optional[Path] = typer.Option(None, help="A real checkpoint's folder (its weights are not needed): keep "
                                        "its tokenizer, chat template, processor settings, token ids and vocabulary "
                                        "size, shrink only widths and depths."),
) -> None:
    """Build a tiny random-weight model of a real architecture, offline, loadable like a checkpoint."""
    if family not in TINY_FAMILIES:
        fail(f"unknown family {family!r}; available: {', '.join(TINY_FAMILIES)}")
    if quant is not None and quant not in TINY_QUANT_FORMATS:
        fail(f"--quant {quant}: tiny builds exist for {', '.join(TINY_QUANT_FORMATS)}")
    if quant is not None and (thinking or family == "deepseek-vl2"):
        fail(f"--quant: tiny quantized builds are of the transformers families' instruct checkpoints"
             f"{'' if family != 'deepseek-vl2' else ' (deepseek-vl2 loads unquantized checkpoints only)'}")
    if head_dim != 16 and (quant is not None or like is not None):
        fail("--head-dim: not with --quant or --like (their widths are the format's or the checkpoint's)")
    if out_dir.exists() and (not out_dir.is_dir() or any(out_dir.iterdir())) and not force:
        fail(f"{out_dir}: exists and is not an empty folder (pass --force to overwrite a model there)")
    if like is not None:
        if thinking:
            fail("--thinking: with --like the chat template is the checkpoint's own")
        if quant is not None:
            fail(f"--quant {quant}: not with --like (a --like build keeps the checkpoint's files, in bf16)")
        with one_line_errors():
            path = make_tiny_like(family, out_dir, like, seed=seed)
        out_console.print(f"wrote tiny {family} (random weights, the files of {like}) to {path}", markup=False)
        return
    with one_line_errors():
        if quant is not None:
            path = make_tiny_quantized(family, out_dir, quant, seed=seed)
        else:
            path = make_tiny(family, out_dir, seed=seed, thinking=thinking, head_dim=head_dim)
    layout = f", {quant}" if quant else ""
    out_console.print(f"wrote tiny {family} (random weights{layout}) to {path}", markup=False)


def list_models() -> None:
    """Model families finbench can load, what each supports, and the released checkpoints
    (hub ids) of each architecture."""
    from rich.table import Table

    from finbench.models.families import FAMILIES
    from finbench.report.console import print_table

    table = Table("family", "model_type", "thinking", "quantization", "max images", "device preprocess",
                  "FLOP count")
    yes_no = {True: "yes", False: "no"}
    for family in FAMILIES:
        caps = family.capabilities
        types = ", ".join(family.model_types) or "any other"  # the generic family takes the rest
        thinking = "per template" if family.tested_on else yes_no[caps.thinking]
        table.add_row(family.family, types, thinking, ", ".join(caps.quantization),
                      "any" if caps.max_images is None else str(caps.max_images),
                      yes_no[caps.device_preprocessing], yes_no[caps.flop_count])
    print_table(out_console, table)  # wrapped between words at a narrow terminal, never inside a name
    for family in FAMILIES:  # the generic family: the architectures it was tested on, and what each does
        tested = family.tested_on
        if tested:
            out_console.print(f"{family.family} (generic) tested on:", markup=False)
        for arch, thinks in tested.items():
            out_console.print(f"  {family.family}: {arch}: thinking {yes_no[thinks]}, quantization "
                              f"{', '.join(family.capabilities.quantization)}", markup=False, highlight=False,
                              soft_wrap=True)
    out_console.print("released checkpoints (hub ids):", markup=False)
    for family in FAMILIES:  # one id per line: a hub id is never broken at the terminal's width
        for checkpoint in family.checkpoints:
            out_console.print(f"  {family.family}: {checkpoint}", markup=False, highlight=False, soft_wrap=True)


def benchmarks() -> None:
    """Benchmarks finbench can run: data forms, protocols and metrics."""
    for benchmark in all_benchmarks():
        info = describe(benchmark)
        out_console.print(f"[bold]{info['name']}[/]: {info['title']} ({info['where']})")
        for label in ("forms", "protocols", "metrics"):
            if info[label]:
                out_console.print(f"  {label}: {info[label]}", highlight=False)
