"""Tiny random-weight models of the real architectures: built offline, loaded back through the
same Auto* entry points a real checkpoint takes, and usable for batched multimodal forwards."""

from __future__ import annotations

import json
import os
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # before transformers is imported: never the network

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("torchvision")  # the processors' video halves need it in transformers 5

from PIL import Image  # noqa: E402
from transformers import AutoModelForImageTextToText, AutoProcessor  # noqa: E402

from finbench.core.types import OPTION_LETTERS  # noqa: E402
from finbench.offline.bpe import TINY_MARKER, TINY_NOTE, check_tokenizer  # noqa: E402
from finbench.offline.tiny import (  # noqa: E402
    TINY_FAMILIES,
    make_tiny,
    read_tiny_marker,
    tiny_family_available,
)

EXPECTED_CLASSES = {
    "qwen2.5-vl": ("Qwen2_5_VLProcessor", "Qwen2_5_VLForConditionalGeneration"),
    "qwen3-vl": ("Qwen3VLProcessor", "Qwen3VLForConditionalGeneration"),
    "internvl": ("InternVLProcessor", "InternVLForConditionalGeneration"),
    "qwen3-vl-moe": ("Qwen3VLProcessor", "Qwen3VLMoeForConditionalGeneration"),
    "qwen3.5": ("Qwen3VLProcessor", "Qwen3_5ForConditionalGeneration"),
    "qwen3.5-moe": ("Qwen3VLProcessor", "Qwen3_5MoeForConditionalGeneration"),
}
EXPECTED_TOKENIZER = {"qwen3.5": "Qwen3_5Tokenizer", "qwen3.5-moe": "Qwen3_5Tokenizer"}  # the others: Qwen2Tokenizer
# How one image part of a chat message renders in each family's real chat template.
IMAGE_PLACEHOLDER = {
    "qwen2.5-vl": "<|vision_start|><|image_pad|><|vision_end|>",
    "qwen3-vl": "<|vision_start|><|image_pad|><|vision_end|>",
    "internvl": "<IMG_CONTEXT>\n",
    "qwen3-vl-moe": "<|vision_start|><|image_pad|><|vision_end|>",
    "qwen3.5": "<|vision_start|><|image_pad|><|vision_end|>",
    "qwen3.5-moe": "<|vision_start|><|image_pad|><|vision_end|>",
}
# Families loaded through the transformers Auto classes (DeepSeek-VL2 has its own loader and tests).
AUTO_FAMILIES = [f for f in TINY_FAMILIES if f in EXPECTED_CLASSES and tiny_family_available(f)]


@pytest.fixture(scope="module", params=AUTO_FAMILIES)
def tiny(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Path]:
    family = request.param
    return family, make_tiny(family, tmp_path_factory.mktemp(family.replace(".", "")) / "model")


def _load(path: Path):
    processor = AutoProcessor.from_pretrained(path)
    model = AutoModelForImageTextToText.from_pretrained(path, dtype=torch.float32).eval()
    return processor, model


def _prompt(processor, n_images: int, question: str, answer_prefix: str = "") -> str:
    content = [{"type": "image"}] * n_images + [{"type": "text", "text": question}]
    messages = [{"role": "user", "content": content}]
    # enable_thinking only matters to Qwen3.5's template (off: instruct use); the others ignore it
    return processor.apply_chat_template(messages, add_generation_prompt=True, tokenize=False,
                                         enable_thinking=False) + answer_prefix


def _images() -> list[Image.Image]:
    # Three sizes and aspect ratios, so the two samples get different numbers of image tokens.
    return [
        Image.new("RGB", (200, 120), (200, 30, 30)),
        Image.new("RGB", (64, 96), (30, 200, 30)),
        Image.new("RGB", (500, 500), (30, 30, 200)),
    ]


def test_loads_through_auto_classes(tiny: tuple[str, Path]) -> None:
    family, path = tiny
    processor, model = _load(path)
    processor_cls, model_cls = EXPECTED_CLASSES[family]
    # AutoProcessor falls back to a bare tokenizer when it cannot resolve the processor class.
    assert type(processor).__name__ == processor_cls
    assert type(model).__name__ == model_cls
    assert type(processor.tokenizer).__name__ == EXPECTED_TOKENIZER.get(family, "Qwen2Tokenizer")
    assert processor.tokenizer.padding_side == "left"
    assert model.dtype == torch.float32
    marker = read_tiny_marker(path)
    assert marker is not None and marker["family"] == family and marker["seed"] == 0
    assert marker["note"] == TINY_NOTE
    assert json.loads((path / TINY_MARKER).read_text())["architecture"] == model_cls


def test_config_token_ids_match_tokenizer(tiny: tuple[str, Path]) -> None:
    family, path = tiny
    processor, model = _load(path)
    tok, config = processor.tokenizer, model.config
    if family == "internvl":
        assert config.image_token_id == tok.convert_tokens_to_ids("<IMG_CONTEXT>") == processor.image_token_id
        assert processor.start_image_token == "<img>" and processor.end_image_token == "</img>"
    else:
        assert config.image_token_id == tok.convert_tokens_to_ids("<|image_pad|>") == processor.image_token_id
        assert config.video_token_id == tok.convert_tokens_to_ids("<|video_pad|>")
        assert config.vision_start_token_id == tok.convert_tokens_to_ids("<|vision_start|>")
        assert config.vision_end_token_id == tok.convert_tokens_to_ids("<|vision_end|>")
        assert config.vision_config.out_hidden_size == config.text_config.hidden_size
    assert tok.eos_token == "<|im_end|>" and tok.pad_token == "<|endoftext|>"
    assert config.get_text_config().vocab_size >= len(tok)
    assert config.get_text_config().num_hidden_layers == 2


def test_tokenization_properties(tiny: tuple[str, Path]) -> None:
    family, path = tiny
    tok = AutoProcessor.from_pretrained(path).tokenizer
    singles = [*OPTION_LETTERS, *(" " + c for c in OPTION_LETTERS), *"0123456789", ".", "-", "%", ",", " "]
    for text in singles:
        assert len(tok.encode(text, add_special_tokens=False)) == 1, text
    processor = AutoProcessor.from_pretrained(path)
    prompts = [
        _prompt(processor, 1, "Which option? A. up B. down", answer_prefix="Answer:"),  # ends in "Answer:"
        _prompt(processor, 1, "Which option? A. up B. down"),  # ends in "assistant\n"
    ]
    assert prompts[1].endswith(("assistant\n", "</think>\n\n"))
    for prompt in prompts:
        base = tok.encode(prompt, add_special_tokens=False)
        for letter in OPTION_LETTERS:
            for spelling in (letter, " " + letter):
                ids = tok.encode(prompt + spelling, add_special_tokens=False)
                assert ids[: len(base)] == base, (prompt, spelling)
                assert len(ids) == len(base) + 1, (prompt, spelling)
    check_tokenizer(tok, tuple(prompts))  # the shared checker agrees


def test_chat_template_renders_images(tiny: tuple[str, Path]) -> None:
    family, path = tiny
    processor = AutoProcessor.from_pretrained(path)
    text = _prompt(processor, 2, "Compare the two charts.")
    assert text.count(IMAGE_PLACEHOLDER[family]) == 2
    # Qwen3.5's template closes an empty thinking block after the prompt when thinking is off
    suffix = "<|im_start|>assistant\n"
    if family.startswith("qwen3.5"):
        suffix += "<think>\n\n</think>\n\n"
    assert text.endswith(suffix)
    messages = [{"role": "user", "content": [{"type": "text", "text": "Hi"}]}]
    no_prompt = processor.apply_chat_template(messages, add_generation_prompt=False, tokenize=False)
    assert not no_prompt.endswith("assistant\n")


def test_batched_forward_with_images(tiny: tuple[str, Path]) -> None:
    family, path = tiny
    processor, model = _load(path)
    images = _images()
    prompts = [
        _prompt(processor, 1, "What was the revenue growth? A. 5% B. 10%", answer_prefix="Answer:"),
        _prompt(processor, 2, "Which chart shows higher profit?"),
    ]
    batch = processor(text=prompts, images=images, padding=True, return_tensors="pt")
    ids, mask = batch["input_ids"], batch["attention_mask"]
    assert ids.shape[0] == 2
    # Left padding: every row ends with real tokens; the shorter row starts with pad tokens.
    assert bool(mask[:, -1].all())
    short = int(mask.sum(1).argmin())
    assert mask[short, 0] == 0 and ids[short, 0] == processor.tokenizer.pad_token_id
    with torch.no_grad():
        out = model(**batch)
    vocab = model.config.get_text_config().vocab_size
    assert out.logits.shape == (2, ids.shape[1], vocab)
    assert torch.isfinite(out.logits).all()

    # Batched and one-by-one last-position logits agree (left padding + the processor's mask).
    per_sample_images = [images[:1], images[1:]]
    for i, (prompt, imgs) in enumerate(zip(prompts, per_sample_images)):
        single = processor(text=[prompt], images=imgs, return_tensors="pt")
        with torch.no_grad():
            logits = model(**single).logits[0, -1]
        torch.testing.assert_close(out.logits[i, -1], logits, rtol=0, atol=1e-5)


def test_same_seed_same_files_other_seed_other_weights(tiny: tuple[str, Path], tmp_path: Path) -> None:
    from safetensors.torch import load_file

    family, path = tiny
    again = make_tiny(family, tmp_path / "again", seed=0)
    for f in sorted(path.iterdir()):
        assert (again / f.name).read_bytes() == f.read_bytes(), f.name
    first, second = load_file(path / "model.safetensors"), load_file(again / "model.safetensors")
    assert first.keys() == second.keys() and all(torch.equal(first[k], second[k]) for k in first)
    other = load_file(make_tiny(family, tmp_path / "other", seed=1) / "model.safetensors")
    assert any(not torch.equal(first[k], other[k]) for k in first)


def test_folder_is_small(tiny: tuple[str, Path]) -> None:
    _, path = tiny
    total = sum(f.stat().st_size for f in path.rglob("*") if f.is_file())
    assert total < 5 * 1024 * 1024, total


def test_wider_hidden_size(tmp_path: Path) -> None:
    path = make_tiny("qwen2.5-vl", tmp_path / "wide", hidden_size=128)
    model = AutoModelForImageTextToText.from_pretrained(path, dtype=torch.float32)
    assert model.config.text_config.hidden_size == 128
    assert model.config.vision_config.out_hidden_size == 128


@pytest.mark.parametrize("family", ["qwen2.5-vl", "qwen3-vl"])
def test_wider_heads_for_vllm_s_cpu_attention(family: str, tmp_path: Path) -> None:
    """`head_dim=32` (`finbench models make-tiny --head-dim 32`): text and vision heads of 32, the
    rotary sections rescaled to sum to head_dim / 2 in the family's proportions; the checkpoint
    loads and a batched forward with images runs; other families are refused in one line."""
    from finbench.cli import app
    from typer.testing import CliRunner

    path = tmp_path / "wide-heads"
    done = CliRunner().invoke(app, ["models", "make-tiny", family, str(path), "--head-dim", "32"])
    assert done.exit_code == 0, done.output
    config = json.loads((path / "config.json").read_text())
    text, vision = config["text_config"], config["vision_config"]
    assert text["hidden_size"] // text["num_attention_heads"] == 32 and text.get("head_dim", 32) == 32
    assert vision["hidden_size"] // vision["num_heads"] == 32
    sections = text["rope_parameters"]["mrope_section"]
    assert sum(sections) == 16 and sections == {"qwen2.5-vl": [4, 6, 6], "qwen3-vl": [8, 4, 4]}[family]
    assert json.loads((path / TINY_MARKER).read_text())["head_dim"] == 32
    processor, model = _load(path)
    batch = processor(text=[_prompt(processor, 1, "Which bar is highest? A. 1 B. 2", answer_prefix="Answer:")],
                      images=_images()[:1], return_tensors="pt")
    with torch.no_grad():
        assert torch.isfinite(model(**batch).logits).all()
    with pytest.raises(ValueError, match="only qwen2.5-vl, qwen3-vl are built with another head size"):
        make_tiny("internvl", tmp_path / "other", head_dim=32)
    refused = CliRunner().invoke(app, ["models", "make-tiny", family, str(tmp_path / "q"), "--head-dim", "32",
                                       "--quant", "bf16"])
    assert refused.exit_code != 0 and "--head-dim: not with --quant or --like" in refused.output


def test_build_leaves_caller_rng_alone(tmp_path: Path) -> None:
    torch.manual_seed(123)
    state = torch.random.get_rng_state()
    make_tiny("qwen2.5-vl", tmp_path / "m", seed=7)
    assert torch.equal(torch.random.get_rng_state(), state)


class _CharTokenizer:
    """A stand-in tokenizer that spells everything bytewise, except that it merges ":A"."""

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        ids: list[int] = []
        i = 0
        while i < len(text):
            if text.startswith(":A", i):
                ids.append(1000)
                i += 2
            else:
                ids.append(ord(text[i]))
                i += 1
        return ids

    def decode(self, ids: list[int]) -> str:
        return "".join(":A" if i == 1000 else chr(i) for i in ids)


def test_check_tokenizer_fails_loudly() -> None:
    with pytest.raises(ValueError, match="single token"):
        check_tokenizer(_CharTokenizer())  # " A" is two characters here
    with pytest.raises(ValueError, match="merges across the boundary"):
        check_tokenizer(_CharTokenizer(), boundary_prompts=("Answer:",), single_tokens=("A",))


def test_bad_arguments_fail_clearly(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unknown tiny family"):
        make_tiny("llava", tmp_path / "x")
    with pytest.raises(ValueError, match="hidden_size"):
        make_tiny("qwen2.5-vl", tmp_path / "y", hidden_size=60)
    with pytest.raises(ValueError, match="no separate thinking variant"):  # one checkpoint, a template switch
        make_tiny("qwen3.5", tmp_path / "z", thinking=True)
    assert not (tmp_path / "z").exists()
    assert read_tiny_marker(tmp_path) is None
