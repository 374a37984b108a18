"""A real checkpoint's files under tiny random weights: `finbench models make-tiny qwen2.5-vl DIR
--like ../shared/fixtures/qwen2.5-vl-7b-instruct` (the released Qwen2.5-VL-7B-Instruct's non-weight
files: the real 152k-token BPE, chat template and processor), then every decoder and the command
line end to end on it. References: the fixture README's facts (measured on these files), git blob
ids of the released files, a full-vocabulary forward, and the number grammar restated."""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import shutil
from pathlib import Path

import pandas as pd
import pytest
import torch
from helpers import SHARPEN, finmme_request, shared
from test_decoding import number_by_full_forwards
from typer.testing import CliRunner

from finbench.cli import app
from finbench.core.types import OPTION_LETTERS
from finbench.runner.decoding import AnswerVocabulary, decode_multi, decode_numerical, decode_single

FIXTURE = shared("fixtures", "qwen2.5-vl-7b-instruct")  # read beside the checkout, never copied into it
if not (FIXTURE / "config.json").exists():
    if os.environ.get("CI"):  # in CI the released files' check must run, never skip
        raise RuntimeError(f"the released Qwen2.5-VL-7B-Instruct files are not at {FIXTURE}")
    pytest.skip(f"{FIXTURE} is absent (the shared folder beside the checkout)", allow_module_level=True)


def git_blob(data: bytes) -> str:
    """The id git gives a file's content (sha1 of 'blob <size>\\0' + content)."""
    return hashlib.sha1(b"blob %d\x00" % len(data) + data).hexdigest()


def test_the_fixture_holds_the_released_files_byte_for_byte():
    readme = (FIXTURE / "README.md").read_text()
    listed = dict(re.findall(r"([\w.]+\.(?:json|txt)) ([0-9a-f]{8})", readme))
    assert len(listed) == 7 and "Apache-2.0" in readme and "cc594898137f460bfe9f0759e9844b3ce807cfb5" in readme
    for name, blob in listed.items():
        assert git_blob((FIXTURE / name).read_bytes()).startswith(blob), name
    assert not list(FIXTURE.glob("*.safetensors"))  # no weights: the point of --like


@pytest.fixture(scope="session")
def like_dir(tmp_path_factory):
    """Built through the command line, then sharpened (×4, weights only: at the stock init a random
    model answers every question alike, which would hide rows mixed up in a batch)."""
    from transformers import AutoModelForImageTextToText

    root = tmp_path_factory.mktemp("like")
    built = CliRunner().invoke(app, ["models", "make-tiny", "qwen2.5-vl", str(root / "built"), "--like", str(FIXTURE)])
    assert built.exit_code == 0, built.output
    sharpened = root / "sharpened"
    shutil.copytree(root / "built", sharpened)
    model = AutoModelForImageTextToText.from_pretrained(sharpened, dtype=torch.float32)
    with torch.no_grad():
        for parameter in model.parameters():
            if parameter.ndim >= 2:
                parameter.mul_(SHARPEN)
    model.save_pretrained(root / "weights")
    shutil.copyfile(root / "weights" / "model.safetensors", sharpened / "model.safetensors")
    return root


@pytest.fixture(scope="session")
def like_model(like_dir):
    from finbench.config.specs import LoadSpec
    from finbench.models import load_model

    return load_model(str(like_dir / "sharpened"), LoadSpec(dtype="float32", device="cpu"))


def test_make_tiny_like_keeps_the_real_files_token_ids_and_vocabulary(like_dir):
    from transformers import AutoConfig

    built = like_dir / "built"
    for source in FIXTURE.iterdir():
        if source.name != "config.json":
            assert (built / source.name).read_bytes() == source.read_bytes(), source.name
    real = json.loads((FIXTURE / "config.json").read_text())  # the released (flat, 4.x) layout
    tiny = AutoConfig.from_pretrained(built)
    text = tiny.get_text_config()
    assert text.vocab_size == real["vocab_size"] == 152064
    for name in ("image_token_id", "video_token_id", "vision_start_token_id", "vision_end_token_id"):
        assert getattr(tiny, name) == real[name], name
    assert (text.bos_token_id, text.eos_token_id) == (real["bos_token_id"], real["eos_token_id"])
    # widths and depths shrunk; the image geometry kept
    assert (text.hidden_size, text.num_hidden_layers, tiny.vision_config.depth) == (64, 2, 2)
    for name in ("patch_size", "spatial_merge_size", "temporal_patch_size", "window_size"):
        assert getattr(tiny.vision_config, name) == real["vision_config"][name], name
    assert (built / "model.safetensors").stat().st_size < 100 * 2**20
    marker = json.loads((built / "finbench_tiny.json").read_text())
    assert marker["note"].startswith("random weights") and "vocab.json" in marker["kept"]


def test_make_tiny_like_refuses_what_it_cannot_build(tmp_path):
    runner = CliRunner()
    empty = tmp_path / "empty"
    empty.mkdir()
    cases = [(["qwen2.5-vl", str(tmp_path / "a"), "--like", str(empty)], "no config.json"),
             (["qwen3-vl", str(tmp_path / "b"), "--like", str(FIXTURE)], "model_type is 'qwen2_5_vl'"),
             (["internvl", str(tmp_path / "c"), "--like", str(FIXTURE)], "--like builds"),
             (["qwen2.5-vl", str(tmp_path / "d"), "--like", str(FIXTURE), "--thinking"], "--thinking"),
             (["qwen2.5-vl", str(tmp_path / "e"), "--like", str(FIXTURE), "--quant", "fp8-block128"], "not with --like")]
    for args, message in cases:
        done = runner.invoke(app, ["models", "make-tiny", *args])
        assert done.exit_code == 2 and message in done.output, (args, done.output)
        assert "Traceback" not in done.output


def test_the_real_tokenizer_template_and_processor_are_in_use(like_model, questions):
    """The fixture README's facts, read back through the loaded adapter."""
    ids = like_model.single_token_ids
    assert ids(list(OPTION_LETTERS)) == list(range(32, 46))
    assert ids([" " + c for c in OPTION_LETTERS]) == [362, 425, 356, 422, 468, 434, 479, 472, 358, 619, 730, 444, 386, 451]
    assert ids(list("0123456789")) == list(range(15, 25)) and ids([".", "-", "%", ",", " "]) == [13, 12, 4, 11, 220]
    tokenizer = like_model.processor.tokenizer
    assert tokenizer.encode("(A", add_special_tokens=False) == [4346]  # one token: a letter after "(" is not "A"
    assert tokenizer.encode("Answer: A", add_special_tokens=False) == [16141, 25, 362]
    assert len(tokenizer) == 151665 and like_model.model.get_output_embeddings().weight.shape[0] == 152064
    vocab = AnswerVocabulary.for_model(like_model)
    assert vocab.letters.tolist() == [list(range(32, 46)), ids([" " + c for c in OPTION_LETTERS])]
    assert vocab.number.tolist()[:10] == list(range(15, 25))
    # the released template's default system prompt; the processor's real pixel limits
    size = like_model.processor.image_processor.size
    assert (size["shortest_edge"], size["longest_edge"]) == (3136, 12845056)
    for (width, height), tokens in {(448, 448): 256, (900, 600): 672, (1024, 768): 999}.items():
        assert like_model.image_token_count(width, height) == tokens
    from PIL import Image

    request = finmme_request(questions[0], [Image.new("RGB", (448, 448), (20, 90, 200))])
    prompt = like_model.prompt_text(request)
    assert prompt.startswith("<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\n")
    prepared = like_model.prepare([request])
    assert int((prepared["input_ids"] == 151655).sum()) == 256


def _full_vocabulary_logits(model, questions):
    """Last-position logits over the whole 152k vocabulary, one question at a time (no batching,
    no row gathering): the reference the constrained decoders must agree with."""
    out = []
    for question in questions:
        with torch.no_grad():
            out.append(model.model(**dict(model.prepare([finmme_request(question)]))).logits[0, -1].double())
    return out


def test_single_choice_on_the_real_vocabulary_equals_a_full_vocabulary_forward(like_model, questions):
    chosen = [q for q in questions if q.kind == "single"][:6]
    vocab = AnswerVocabulary.for_model(like_model)
    n_options = torch.tensor([len(q.options) for q in chosen])
    batched = decode_single(like_model, like_model.prepare([finmme_request(q) for q in chosen]), n_options, vocab)
    for question, prediction, logits in zip(chosen, batched, _full_vocabulary_logits(like_model, chosen)):
        k = len(question.options)
        bare, spaced = vocab.letters[0, :k], vocab.letters[1, :k]
        per_option = torch.logsumexp(torch.stack([logits[bare], logits[spaced]]), 0)
        reference = torch.log_softmax(per_option, 0)
        assert prediction.answer == OPTION_LETTERS[int(reference.argmax())]
        assert max(abs(a - b) for a, b in zip(prediction.option_logprobs, reference.tolist())) <= 1e-4
    assert len({p.answer for p in batched}) > 1  # the answers depend on the question


def test_multi_choice_on_the_real_vocabulary_follows_its_grammar_batched_or_alone(like_model, questions):
    chosen = [q for q in questions if q.kind == "multi"][:6]
    vocab = AnswerVocabulary.for_model(like_model)
    n_options = torch.tensor([len(q.options) for q in chosen])
    batched = decode_multi(like_model, like_model.prepare([finmme_request(q) for q in chosen]), n_options, vocab)
    alone = [decode_multi(like_model, like_model.prepare([finmme_request(q)]), n_options[i:i + 1], vocab)[0]
             for i, q in enumerate(chosen)]
    assert [p.answer for p in batched] == [p.answer for p in alone]
    for question, prediction in zip(chosen, batched):
        letters = prediction.answer
        assert letters and list(letters) == sorted(set(letters))
        assert all(OPTION_LETTERS.index(c) < len(question.options) for c in letters)


def test_the_number_grammar_on_the_real_vocabulary_equals_a_full_vocabulary_loop(like_model, questions):
    """Digits are single tokens here and `(A` is one token: each step of the constrained decoder
    must be the best grammatical token of a full forward over all 152,064 logits."""
    vocab = AnswerVocabulary.for_model(like_model)
    numeric = [q for q in questions if q.kind == "numerical"][:2]
    budget = 5
    decoded = decode_numerical(like_model, like_model.prepare([finmme_request(q) for q in numeric]), budget, vocab)
    for question, prediction in zip(numeric, decoded):
        inputs = dict(like_model.prepare([finmme_request(question)]))
        with torch.no_grad():
            assert like_model.model(**inputs).logits.shape[-1] == 152064  # the reference sees every logit
        text, chosen = number_by_full_forwards(like_model, inputs, budget, vocab)
        assert prediction.answer == text.strip()
        assert re.fullmatch(r"-?\d*(\.\d*)?%?", prediction.answer)
        assert max(abs(a - b) for a, b in zip(prediction.step_logprobs[0], chosen)) <= 1e-4
        assert math.isclose(prediction.confidence, math.exp(sum(chosen)), rel_tol=1e-4)


@pytest.mark.slow
def test_the_command_line_end_to_end_on_the_real_files(like_dir, synthetic_parquet, tmp_path):
    """`finbench run` on the tiny model in the real files, both protocols. The released
    generation_config.json asks for sampling (do_sample, temperature 1e-6, repetition penalty):
    the official protocol must stay greedy and repeatable all the same. Qwen2.5-VL declares no
    thinking: a thinking budget is one start-up line."""
    runner = CliRunner()
    model = str(like_dir / "sharpened")
    base = ["run", "--model", model, "--data", str(synthetic_parquet), "--limit", "12", "--dtype", "float32",
            "--device", "cpu", "--bootstrap", "50", "--no-progress"]
    done = runner.invoke(app, [*base, "--out", str(tmp_path / "constrained")])
    assert done.exit_code == 0, done.output[-3000:]
    samples = pd.read_parquet(tmp_path / "constrained" / "samples.parquet")
    results = json.loads((tmp_path / "constrained" / "results.json").read_text())
    assert results["n_questions"] == 12 and results["errors"]["count"] == 0
    assert samples["prompt"].str.startswith("<|im_start|>system\nYou are a helpful assistant.").all()
    for kind, answer in zip(samples["kind"], samples["answer"]):
        assert re.fullmatch(r"[A-N]" if kind == "single" else r"[A-N]+" if kind == "multi" else r"-?\d*(\.\d*)?%?",
                            answer), (kind, answer)
    assert done.output.strip().splitlines()[-1].startswith("sharpened · finmme · constrained · FinScore ")
    outputs = []
    for name in ("official-a", "official-b"):
        again = runner.invoke(app, [*base, "--protocol", "official", "--max-new-tokens", "6", "--out", str(tmp_path / name)])
        assert again.exit_code == 0, again.output[-3000:]
        outputs.append(list(pd.read_parquet(tmp_path / name / "samples.parquet")["raw_output"]))
    assert outputs[0] == outputs[1] and any(outputs[0])
    thinking = runner.invoke(app, [*base, "--think-budget", "8", "--out", str(tmp_path / "think")])
    assert thinking.exit_code == 2 and "think" in thinking.output and not (tmp_path / "think").exists()


@pytest.mark.slow
def test_like_a_qwen3_vl_thinking_checkpoint_keeps_its_template_and_reasons(tmp_path, synthetic_parquet):
    """Qwen3-VL's layout (head_dim, interleaved M-RoPE, DeepStack) through --like, on a thinking
    checkpoint's files (here a tiny one's: no released Qwen3-VL files are in this repository):
    the template that opens <think> is kept byte for byte, and a --think-budget run reasons within
    its budget, then answers within each item's options."""
    from finbench.offline.tiny import make_tiny

    real = make_tiny("qwen3-vl", tmp_path / "thinking-files", thinking=True)
    for weights in real.glob("*.safetensors"):
        weights.unlink()  # only the non-weight files are needed
    runner = CliRunner()
    built = runner.invoke(app, ["models", "make-tiny", "qwen3-vl", str(tmp_path / "like"), "--like", str(real)])
    assert built.exit_code == 0, built.output
    for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja", "preprocessor_config.json"):
        if (real / name).exists():
            assert (tmp_path / "like" / name).read_bytes() == (real / name).read_bytes(), name
    done = runner.invoke(app, ["run", "--model", str(tmp_path / "like"), "--data", str(synthetic_parquet), "--limit", "6",
                               "--think-budget", "4", "--dtype", "float32", "--device", "cpu", "--bootstrap", "0",
                               "--no-progress", "--out", str(tmp_path / "run")])
    assert done.exit_code == 0, done.output[-3000:]
    samples = pd.read_parquet(tmp_path / "run" / "samples.parquet")
    assert (samples["error"] == "").all() and (samples["reasoning_tokens"] <= 4).all()
    assert samples["prompt"].str.contains("<think>").all()
    for kind, answer, n in zip(samples["kind"], samples["answer"], samples["n_options"]):
        if kind == "single":
            assert answer in OPTION_LETTERS[:n]
