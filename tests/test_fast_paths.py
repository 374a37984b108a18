"""The exact fast paths (models/fast_paths.py) against the reference paths they replace, on the CPU
in fp32: padded GEMM widths (a tower and a whole model whose vision MLP width is no multiple of
64), the vision tower's indices built in the workers, the mask-free prefill over right-aligned
rows, static decode steps, and free generation and thinking, which must not notice any of them.
References: the masked left-padded prefill, the dynamic-cache decode step, a full recompute of the
prompt with the fed tokens appended, a brute-force attention with repeated KV heads. CUDA graphs
need CUDA: their test is skipped elsewhere."""

from __future__ import annotations

import math

import pytest
import torch
from helpers import SHARPEN, finmme_request, sharpened_tiny_dir

from finbench.models import static_decode
from finbench.models.fast_paths import FastPaths, last_real, right_aligned
from finbench.models.padding import pad_gemm_widths, pad_mlp, padded_width
from finbench.offline.tiny import tiny_family_available
from finbench.runner.decoding import AnswerVocabulary, decode_multi, decode_numerical, decode_single
from finbench.runner.preprocess import decode_images

TOL = 1e-5


def fast_twin(model, **paths):
    """The same loaded weights behind an adapter with the given fast paths (default: all on)."""
    chosen = FastPaths(**paths) if paths else FastPaths.everywhere()
    return type(model)(model.model, model.processor, model.source, fast_paths=chosen)


def _mixed_requests(questions):
    """Requests with two images, one and none, of different lengths (left padding in a batch)."""
    chosen = [questions[0], questions[5], questions[3], questions[8]]
    images = [decode_images(q) for q in chosen]
    shown = [images[0] + images[1], images[1], [], images[3]]
    return [finmme_request(q, i) for q, i in zip(chosen, shown)]


FAMILIES = [f for f in ("qwen2.5-vl", "qwen3-vl", "qwen3-vl-moe", "internvl", "qwen3.5") if tiny_family_available(f)]


@pytest.fixture(scope="module", params=FAMILIES)
def family_model(request, tmp_path_factory):
    """A sharpened tiny model of each family (the conftest's `tiny_model` for Qwen2.5-VL)."""
    if request.param == "qwen2.5-vl":
        return request.getfixturevalue("tiny_model")
    from finbench.config.specs import LoadSpec
    from finbench.models import load_model

    return load_model(str(sharpened_tiny_dir(tmp_path_factory, request.param)), LoadSpec(dtype="float32", device="cpu"))


def _needs(model, path):
    if path not in model.supports:
        pytest.skip(f"{model.family} keeps the reference path for {path}")


# ---- padded widths ----------------------------------------------------------------------------
def test_padded_width_rounds_up_to_the_multiple():
    assert [padded_width(n) for n in (1, 64, 65, 3420, 3456, 4304)] == [64, 64, 128, 3456, 3456, 4352]


class _Gated(torch.nn.Module):
    def __init__(self, width, hidden=32, bias=True):
        super().__init__()
        self.gate_proj = torch.nn.Linear(hidden, width, bias=bias)
        self.up_proj = torch.nn.Linear(hidden, width, bias=bias)
        self.down_proj = torch.nn.Linear(width, hidden, bias=bias)

    def forward(self, x):
        return self.down_proj(torch.nn.functional.silu(self.gate_proj(x)) * self.up_proj(x))


class _NotTheShape(_Gated):
    """Names of a gated MLP, but its forward reads the hidden width itself: padding would change it."""

    def forward(self, x):
        hidden = self.gate_proj(x) * self.up_proj(x)
        return self.down_proj(hidden / hidden.shape[-1])


def test_padding_an_mlp_keeps_its_output_and_a_foreign_forward_is_left_alone():
    torch.manual_seed(0)
    mlp, x = _Gated(100), torch.randn(5, 32)
    expected = mlp(x)
    assert pad_mlp(mlp) == (100, 128)
    assert mlp.gate_proj.weight.shape == (128, 32) and mlp.down_proj.weight.shape == (32, 128)
    assert mlp.up_proj.bias.shape == (128,) and not mlp.up_proj.bias[100:].any()
    assert (mlp(x) - expected).abs().max() <= TOL
    assert pad_mlp(mlp) is None  # aligned now: nothing to do
    foreign = _NotTheShape(100)
    before = foreign(x)
    assert pad_mlp(foreign) is None and foreign.gate_proj.weight.shape == (100, 32)
    assert torch.equal(foreign(x), before)


def _qwen25_tower(intermediate):
    from transformers.models.qwen2_5_vl.modeling_qwen2_5_vl import Qwen2_5_VisionTransformerPretrainedModel

    from finbench.offline.shapes import full_size_config

    config = full_size_config("qwen2.5-vl-7b").vision_config
    config.depth, config.hidden_size, config.num_heads, config.out_hidden_size = 2, 64, 4, 32
    config.intermediate_size, config.fullatt_block_indexes, config._attn_implementation = intermediate, [1], "sdpa"
    torch.manual_seed(0)
    return Qwen2_5_VisionTransformerPretrainedModel._from_config(config).eval(), 3 * 2 * 14 * 14


def _qwen3_tower(intermediate):
    from transformers.models.qwen3_vl.configuration_qwen3_vl import Qwen3VLVisionConfig
    from transformers.models.qwen3_vl.modeling_qwen3_vl import Qwen3VLVisionModel

    config = Qwen3VLVisionConfig(depth=2, hidden_size=32, intermediate_size=intermediate, num_heads=2, patch_size=16,
                                 spatial_merge_size=2, temporal_patch_size=2, out_hidden_size=48,
                                 num_position_embeddings=64, deepstack_visual_indexes=[0])
    config._attn_implementation = "sdpa"
    torch.manual_seed(0)
    return Qwen3VLVisionModel._from_config(config).eval(), 3 * 2 * 16 * 16


@pytest.mark.parametrize("build,width,classes", [(_qwen25_tower, 100, {"Qwen2_5_VLMLP": [100, 128]}),
                                                 (_qwen3_tower, 90, {"Qwen3VLVisionMLP": [90, 128]})],
                         ids=["qwen2.5-vl (gated)", "qwen3-vl (two-layer)"])
def test_a_padded_tower_equals_the_unpadded_one(build, width, classes):
    tower, patch = build(width)
    with torch.no_grad():  # sharpened: at the stock init the MLP's share of the output is tiny
        for parameter in tower.parameters():
            parameter.mul_(SHARPEN if parameter.ndim >= 2 else 1.0)
    grid = torch.tensor([[1, 8, 12], [1, 4, 6]])
    torch.manual_seed(1)
    pixels = torch.randn(int(grid.prod(-1).sum()), patch)
    with torch.no_grad():
        expected = tower(pixels, grid_thw=grid).pooler_output
        assert pad_gemm_widths(tower) == classes
        got = tower(pixels, grid_thw=grid).pooler_output
    assert (got - expected).abs().max() <= TOL and expected.abs().max() > 0.1


@pytest.fixture(scope="module")
def odd_width_dir(tmp_path_factory):
    """A tiny Qwen2.5-VL checkpoint whose vision MLP is 100 wide (the tiny default 128 is aligned),
    built from the saved config with new random weights, sharpened as `sharpened_tiny_dir` does."""
    from transformers import AutoConfig, AutoModelForImageTextToText

    from finbench.offline.tiny import make_tiny

    path = make_tiny("qwen2.5-vl", tmp_path_factory.mktemp("models") / "tiny-odd-width", weights_dtype="float32")
    config = AutoConfig.from_pretrained(path)
    config.vision_config.intermediate_size = 100
    with torch.random.fork_rng():
        torch.manual_seed(0)
        model = AutoModelForImageTextToText.from_config(config, dtype=torch.float32)
    with torch.no_grad():
        for parameter in model.parameters():
            if parameter.ndim >= 2:
                parameter.mul_(SHARPEN)
    model.save_pretrained(path)
    return path


@pytest.mark.slow
def test_a_padded_model_answers_as_the_unpadded_one(odd_width_dir, synthetic_parquet, tmp_path):
    from finbench.models.qwen2_5_vl import Qwen25VL
    from finbench.runner.engine import run_benchmark
    from finbench.config.specs import RunConfig

    runs = {}
    for name, paths in (("reference", FastPaths.reference()), ("padded", FastPaths(pad_widths=True))):
        model = Qwen25VL.load(str(odd_width_dir), dtype="float32", device="cpu", fast_paths=paths)
        config = RunConfig.flat(model=str(odd_width_dir), data=str(synthetic_parquet), out=str(tmp_path / name), limit=16,
                           batch_size=8, dtype="float32", device="cpu", bootstrap=0)
        runs[name] = (model, run_benchmark(config, model, show_progress=False))
    (reference, plain), (padded, fast) = runs["reference"], runs["padded"]
    assert padded.padded_widths == {"Qwen2_5_VLMLP": [100, 128]} and reference.padded_widths == {}
    assert padded.model.model.visual.blocks[0].mlp.up_proj.out_features == 128
    assert fast.results["fingerprint"]["padded_widths"] == {"Qwen2_5_VLMLP": [100, 128]}
    assert "padded_widths" not in plain.results["fingerprint"]  # unpadded runs keep their cache keys
    assert list(plain.samples["answer"]) == list(fast.samples["answer"]) and plain.samples["answer"].nunique() > 1
    for a, b in zip(plain.samples["option_probs"], fast.samples["option_probs"]):
        assert len(a) == len(b) and max([abs(x - y) for x, y in zip(a, b)] + [0.0]) <= TOL
    assert (plain.samples["confidence"] - fast.samples["confidence"]).abs().max() <= TOL


# ---- vision indices in the workers ------------------------------------------------------------
def test_vision_indices_from_the_workers_give_the_tower_s_own_results(tiny_model, questions, monkeypatch):
    from transformers.models.qwen2_5_vl import modeling_qwen2_5_vl as qwen

    fast = fast_twin(tiny_model, vision_indices=True)
    requests = [finmme_request(q) for q in questions[:3]]
    prepared = fast.prepare(requests)
    assert fast.vision_index_keys <= set(prepared) and isinstance(prepared["image_max_window_seqlen"], int)
    assert not set(tiny_model.prepare(requests)) & fast.vision_index_keys  # off: nothing added
    given = []
    original = qwen.get_vision_window_index

    def recording(*args, kwargs=None, **rest):
        given.append(kwargs is not None and "window_index" in kwargs)
        return original(*args, kwargs=kwargs, **rest)

    monkeypatch.setattr(qwen, "get_vision_window_index", recording)
    expected, _ = tiny_model.prefill(tiny_model.prepare(requests))
    got, _ = fast.prefill(prepared)
    assert given == [False, True]  # the tower computed its own once, then took the workers'
    assert torch.equal(got, expected)
    # broken: another batch's indices (other images) do not give these images' answer
    wrong = dict(prepared, **fast.vision_indices(tiny_model.prepare(requests[:1])["image_grid_thw"]))
    try:
        assert not torch.equal(fast.prefill(wrong)[0], expected)
    except (RuntimeError, ValueError, IndexError):
        pass  # or they do not fit at all


# ---- the mask-free prefill --------------------------------------------------------------------
def test_right_aligned_moves_the_real_tokens_first():
    mask = torch.tensor([[0, 0, 1, 1, 1], [1, 1, 1, 1, 1], [0, 1, 1, 1, 1]])
    ids = torch.tensor([[9, 9, 1, 2, 3], [4, 5, 6, 7, 8], [9, 1, 2, 3, 4]])
    order = right_aligned(mask)
    assert ids.gather(1, order).tolist() == [[1, 2, 3, 9, 9], [4, 5, 6, 7, 8], [1, 2, 3, 4, 9]]
    hidden = ids.gather(1, order)[..., None].float()
    assert last_real(hidden, mask.sum(-1))[:, 0].tolist() == [3.0, 8.0, 4.0]


def test_mask_free_prefill_equals_the_masked_one(family_model, questions, monkeypatch):
    _needs(family_model, "causal_prefill")
    fast = fast_twin(family_model, causal_prefill=True)
    requests = _mixed_requests(questions)
    inputs = family_model.prepare(requests)
    assert not inputs["attention_mask"].all()
    expected, _ = family_model.prefill(dict(inputs))
    got, state = fast.prefill(fast.prepare(requests))
    assert (got - expected).abs().max() <= TOL and expected.abs().max() > 0.1
    assert state.attention_mask[:, 0].all()  # right-aligned: every row starts with a real token
    vocab = AnswerVocabulary.for_model(family_model)
    reference = family_model.score_options(family_model.prepare(requests), vocab.letters)
    assert (fast.score_options(fast.prepare(requests), vocab.letters) - reference).abs().max() <= TOL
    # broken: the last column of right-aligned rows is a pad for every row but the longest
    from finbench.models import base

    monkeypatch.setattr(base, "last_real", lambda hidden, lengths: hidden[:, -1])
    assert (fast.prefill(fast.prepare(requests))[0] - expected).abs().max() > 1e-2


def test_the_prefill_runs_without_an_attention_mask(tiny_model, questions, monkeypatch):
    fast = fast_twin(tiny_model, causal_prefill=True)
    seen = []
    language_model = fast.model.model.language_model
    original = type(language_model).forward

    def recording(self, *args, **kwargs):
        seen.append(kwargs.get("attention_mask"))
        return original(self, *args, **kwargs)

    monkeypatch.setattr(type(language_model), "forward", recording)
    fast.prefill(fast.prepare(_mixed_requests(questions)))
    tiny_model.prefill(tiny_model.prepare(_mixed_requests(questions)))
    assert seen[0] is None and seen[1] is not None


def _extended(inputs, tokens):
    """The left-padded batch with `tokens` [B, k] appended: the full-recompute reference."""
    rows, added = tokens.shape
    extended = dict(inputs, input_ids=torch.cat([inputs["input_ids"], tokens], 1),
                    attention_mask=torch.cat([inputs["attention_mask"], torch.ones(rows, added, dtype=torch.long)], 1))
    if "mm_token_type_ids" in inputs:
        types = inputs["mm_token_type_ids"]
        extended["mm_token_type_ids"] = torch.cat([types, torch.zeros(rows, added, dtype=types.dtype)], 1)
    return extended


@pytest.mark.parametrize("static", [True, False], ids=["static buffer", "dynamic cache"])
def test_decode_steps_after_a_mask_free_prefill_equal_a_full_recompute(family_model, questions, static):
    _needs(family_model, "causal_prefill")
    fast = fast_twin(family_model, causal_prefill=True, static_decode=static)
    requests = _mixed_requests(questions)
    steps = torch.tensor([family_model.single_token_ids(list(t)) for t in (" B,C4", "7.1%0", "A,D 2", "9-3.5")])
    _, state = fast.prefill(fast.prepare(requests))
    reference_inputs = family_model.prepare(requests)
    for k in range(steps.shape[1]):
        stepped = fast.decode_step(state, steps[:, k])
        recomputed, _ = family_model.prefill(_extended(reference_inputs, steps[:, :k + 1]))
        assert (stepped - recomputed).abs().max() <= TOL, f"step {k}"
    assert bool(state.static) is static
    # broken: the same step fed to the wrong rows
    _, state = fast.prefill(fast.prepare(requests))
    swapped = fast.decode_step(state, steps[:, 0].flip(0))
    assert (swapped - family_model.prefill(_extended(reference_inputs, steps[:, :1]))[0]).abs().max() > 1e-3


def test_static_steps_after_the_masked_prefill_equal_the_dynamic_cache_steps(family_model, questions, monkeypatch):
    """The static buffer after the reference (left-padded, masked) prefill, past its first size
    (ROOM 2: it grows), with every step's attention counted in the one-query kernel."""
    _needs(family_model, "static_decode")
    monkeypatch.setattr(static_decode, "ROOM", 2)
    fast = fast_twin(family_model, static_decode=True)
    calls = []
    original = static_decode.one_query_attention
    monkeypatch.setattr(static_decode, "one_query_attention", lambda *a, **k: calls.append(1) or original(*a, **k))
    inputs = family_model.prepare(_mixed_requests(questions))
    _, reference_state = family_model.prefill(dict(inputs))
    _, state = fast.prefill(dict(inputs))
    tokens = torch.tensor(family_model.single_token_ids([",", "5", " C", "."]))
    for k in range(5):
        expected = family_model.decode_step(reference_state, tokens.roll(k))
        assert (fast.decode_step(state, tokens.roll(k)) - expected).abs().max() <= TOL
    assert state.static.kv.capacity > inputs["input_ids"].shape[1] + 2  # it grew
    layers = len(family_model.model.model.language_model.layers)
    assert len(calls) == 5 * layers and state.cache is None


def test_one_query_attention_equals_repeated_kv_heads():
    torch.manual_seed(0)
    query, key, value = torch.randn(3, 8, 1, 16), torch.randn(3, 2, 10, 16), torch.randn(3, 2, 10, 16)
    mask = torch.rand(3, 10) > 0.3
    mask[:, 0] = True
    got = static_decode.one_query_attention(query, key, value, mask, scale=0.25)
    repeated = [t.repeat_interleave(4, dim=1) for t in (key, value)]  # what repeat_kv writes out
    weights = (query @ repeated[0].transpose(-1, -2) * 0.25).masked_fill(~mask[:, None, None, :], -math.inf)
    assert (got - torch.softmax(weights, -1) @ repeated[1]).abs().max() <= 1e-6
    with pytest.raises(ValueError, match="single-token decode steps"):
        static_decode.transformers_one_query(None, torch.randn(1, 2, 3, 4), key, value, mask[:, None, None])


@pytest.mark.parametrize("kind", ["single", "multi", "numerical"])
def test_the_decoders_give_the_reference_answers(family_model, questions, kind):
    fast = fast_twin(family_model)
    chosen = [q for q in questions if q.kind == kind][:8]
    vocab = AnswerVocabulary.for_model(family_model)
    n_options = torch.tensor([len(q.options) for q in chosen])
    decode = {"single": decode_single, "multi": decode_multi,
              "numerical": lambda m, i, n, v: decode_numerical(m, i, 8, v)}[kind]
    requests = [finmme_request(q) for q in chosen]
    expected = decode(family_model, family_model.prepare(requests), n_options, vocab)
    got = decode(fast, fast.prepare(requests), n_options, vocab)
    assert [p.answer for p in got] == [p.answer for p in expected]
    for a, b in zip(got, expected):
        assert a.option_logprobs == pytest.approx(b.option_logprobs, abs=TOL)
        assert len(a.step_logprobs) == len(b.step_logprobs)
        for step_a, step_b in zip(a.step_logprobs, b.step_logprobs):
            assert step_a == pytest.approx(step_b, abs=TOL)
        assert math.isclose(a.confidence, b.confidence, rel_tol=1e-4)


def test_generation_and_thinking_do_not_notice_the_fast_paths(family_model, questions):
    from finbench.runner.thinking import think

    fast = fast_twin(family_model)
    requests = _mixed_requests(questions)
    texts, counts = family_model.generate(family_model.prepare(requests), max_new_tokens=5)
    assert fast.generate(fast.prepare(requests), max_new_tokens=5) == (texts, counts)
    if family_model.thinking_token_ids() is None:
        return
    thinking = [finmme_request(q, thinking=True) for q in questions[:3]]
    vocab = AnswerVocabulary.for_model(family_model)
    answers = []
    for model in (family_model, fast):
        inputs, _ = think(model, model.prepare(thinking), 6, [r.answer_prefix or "Answer:" for r in thinking])
        answers.append(model.score_options(inputs, vocab.letters))  # positions rebuilt on the model's thread
    assert (answers[0] - answers[1]).abs().max() <= TOL


def test_the_fingerprint_names_the_paths_whose_kernels_differ(tiny_model):
    assert tiny_model.fast.on() == [] and "fast_paths" not in tiny_model.fingerprint()  # CPU: reference paths
    fast = fast_twin(tiny_model)
    assert fast.fingerprint()["fast_paths"] == ["causal_prefill", "static_decode"]
    assert "fast_paths" not in fast_twin(tiny_model, vision_indices=True, cuda_graphs=True).fingerprint()
    cuda = FastPaths().resolved(torch.device("cuda"))
    assert cuda == FastPaths.everywhere()  # None: on for CUDA
    assert FastPaths().resolved(torch.device("cpu")) == FastPaths.reference()
    assert FastPaths().resolved(torch.device("cuda"), frozenset({"pad_widths"})).on() == ["pad_widths"]


def test_qwen3_5_and_internvl_keep_the_masked_prefill_and_the_dynamic_cache(family_model):
    if family_model.family not in ("qwen3.5", "internvl"):
        pytest.skip("families that keep the reference paths")
    assert family_model.supports == frozenset({"pad_widths"})
    assert fast_twin(family_model).fast.on() == ["pad_widths"]


# ---- CUDA graphs (CUDA only) ------------------------------------------------------------------
@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA graphs need a CUDA device")
def test_graphed_decode_steps_equal_the_eager_static_steps(tiny_qwen_dir, questions):
    from finbench.config.specs import LoadSpec
    from finbench.models import load_model

    eager = load_model(str(tiny_qwen_dir), LoadSpec(dtype="float32", device="cuda"))
    graphed = fast_twin(eager)
    eager = fast_twin(eager, causal_prefill=True, static_decode=True, cuda_graphs=False)
    requests = _mixed_requests(questions)
    tokens = torch.tensor(eager.single_token_ids([",", "5", " C", "."]), device="cuda")
    _, eager_state = eager.prefill(eager.to_device(eager.prepare(requests)))
    _, graphed_state = graphed.prefill(graphed.to_device(graphed.prepare(requests)))
    for k in range(6):
        expected = eager.decode_step(eager_state, tokens.roll(k))
        assert (graphed.decode_step(graphed_state, tokens.roll(k)) - expected).abs().max() <= TOL
    assert graphed.graphs.enabled and graphed.graphs.captures == 1 and graphed.graphs.checked
    assert graphed_state.static.graph is not None and eager_state.static.graph is None


def test_no_fast_paths_reaches_the_adapter_from_the_cli(tiny_qwen_dir, monkeypatch):
    """`--no-fast-paths` → RunConfig.load.fast_paths False → the one loader asks for the reference
    paths, which the adapter keeps even where the defaults would turn them on (CUDA)."""
    from typer.testing import CliRunner

    from finbench.cli import app
    from finbench.config.specs import LoadSpec
    from finbench.models import load_model
    from finbench.models.fast_paths import FastPaths

    captured = {}

    def evaluate(model, benchmark, **options):
        captured.update(options)
        raise ValueError("captured")

    monkeypatch.setattr("finbench.app.api.evaluate", evaluate)
    done = CliRunner().invoke(app, ["run", "--model", str(tiny_qwen_dir), "--no-fast-paths", "--no-progress"])
    assert done.exit_code == 2 and captured["fast_paths"] is False
    seen = []
    original = FastPaths.resolved

    def resolved(self, device, supported=frozenset()):
        seen.append(self)
        return original(self, torch.device("cuda"), supported)  # as if on CUDA: the defaults would be on

    monkeypatch.setattr(FastPaths, "resolved", resolved)
    reference = load_model(str(tiny_qwen_dir), LoadSpec(dtype="float32", device="cpu", fast_paths=False))
    default = load_model(str(tiny_qwen_dir), LoadSpec(dtype="float32", device="cpu"))
    assert seen[0] == FastPaths.reference() and reference.fast.on() == []
    assert default.fast.on()  # the same load without the option: paths on where CUDA would have them
