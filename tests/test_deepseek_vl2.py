"""DeepSeek-VL2 against the official implementation, through the reference fixtures (three tiny
random-weight models run by the official code, see the fixtures' README): prompt ids, pixel
tiles, image layout, every intermediate tensor and the last-position logits; the official
processor's image-token counts; and the adapter contract on a `make-tiny` checkpoint (batch
invariance, KV-cached decode = full recompute, greedy generation = a cache-free loop)."""

from __future__ import annotations

import hashlib
import json
import math
import os
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers import finmme_request, shared
from PIL import Image

from finbench.core.types import ModelRequest
from finbench.runner.decoding import AnswerVocabulary, decode_multi, decode_numerical, decode_single
from finbench.runner.preprocess import decode_images


def _fixture_root() -> Path | None:
    """The fixtures live in the project's shared/ folder beside the checkout (CI lays a copy there)."""
    candidates = [os.environ.get("FINBENCH_DEEPSEEK_VL2_FIXTURES", ""), str(shared("fixtures", "deepseek-vl2")),
                  str(Path(__file__).parent / "fixtures" / "deepseek-vl2")]
    return next((Path(c) for c in candidates if c and (Path(c) / "token_counts.json").is_file()), None)


FIXTURES = _fixture_root()
if FIXTURES is None and os.environ.get("CI"):  # in CI the official-model check must run, never skip
    raise RuntimeError("DeepSeek-VL2 reference fixtures not found beside the checkout (../shared/fixtures)")
needs_fixtures = pytest.mark.skipif(FIXTURES is None, reason="DeepSeek-VL2 reference fixtures not found "
                                    "(set FINBENCH_DEEPSEEK_VL2_FIXTURES)")
VARIANTS = ("tiny", "small", "base")
TOL = 1e-4


@pytest.fixture(autouse=True)
def _no_grad():
    """Tests call model internals next to the adapter's inference-mode methods."""
    with torch.no_grad():
        yield


def _load(path):
    from finbench.config.specs import LoadSpec
    from finbench.models import load_model

    return load_model(str(path), LoadSpec(dtype="float32", device="cpu"))


@pytest.fixture(scope="module")
def fixture_models():
    cache: dict[str, object] = {}

    def get(variant: str):
        if variant not in cache:
            cache[variant] = _load(FIXTURES / variant)
        return cache[variant]

    return get


def _user(content, images=()) -> ModelRequest:
    """A one-turn user request."""
    return ModelRequest(messages=({"role": "user", "content": content},), images=tuple(images))


def _parts(text: str, n_images: int) -> list[dict]:
    return [{"type": "image"}] * n_images + [{"type": "text", "text": text}]


def _fixture_request(folder: Path, swap: bool = False) -> ModelRequest:
    reference = json.loads((folder / "reference.json").read_text())
    question = reference["prompt_content"].split("<image>\n")[-1]
    images = [Image.open(folder / "images" / f"img{i}.png").convert("RGB") for i in range(2)]
    if swap:
        images.reverse()
    content = [{"type": "image"}, {"type": "image"}, {"type": "text", "text": question}]
    return ModelRequest(messages=({"role": "user", "content": content},), images=tuple(images))


# ---------------------------------------------------------------------------------------------
# The official model, through the fixtures
# ---------------------------------------------------------------------------------------------


@needs_fixtures
@pytest.mark.parametrize("variant", VARIANTS)
def test_matches_the_official_model(fixture_models, variant):
    from safetensors.torch import load_file

    folder = FIXTURES / variant
    ref = load_file(str(folder / "reference.safetensors"))
    meta = json.loads((folder / "reference.json").read_text())
    model = fixture_models(variant)
    inputs = model.prepare([_fixture_request(folder)])

    # processor: exact
    assert torch.equal(inputs["input_ids"], ref["input_ids"])
    assert torch.equal(inputs["attention_mask"], ref["attention_mask"])
    assert torch.equal(inputs["images_seq_mask"].long(), ref["images_seq_mask"])
    assert torch.equal(inputs["images_spatial_crop"], ref["images_spatial_crop"])
    tiles = np.stack([np.asarray(Image.open(folder / "tiles" / f"tile_{i:02d}.png")) for i in range(8)])
    assert np.array_equal(inputs["tiles"].numpy(), tiles.transpose(0, 3, 1, 2))
    # image layout: the fixture's per-position (code, tile, token) restated as projector rows
    code, tile, token = ref["image_layout"], ref["layout_tile"].long(), ref["layout_token"].long()
    per_tile = 196
    expected = torch.where((code == 1) | (code == 4), tile * per_tile + token, torch.where(code == 3, -1, -2))[code > 0]
    assert torch.equal(inputs["image_source"], expected)

    # model internals, read through hooks on the adapter's own prefill (one forward per variant)
    seen: dict[str, torch.Tensor] = {}
    states: list[torch.Tensor] = []
    layers = model.model.language.model.layers
    hooks = [model.model.vision.register_forward_pre_hook(lambda m, a: seen.__setitem__("pixels", a[0])),
             model.model.vision.register_forward_hook(lambda m, a, o: seen.__setitem__("vision", o)),
             model.model.projector.register_forward_hook(lambda m, a, o: seen.__setitem__("projector", o)),
             layers[0].register_forward_pre_hook(lambda m, a: states.append(a[0])),
             model.model.language.model.norm.register_forward_hook(lambda m, a, o: seen.__setitem__("final", o))]
    hooks += [layer.register_forward_hook(lambda m, a, o: states.append(o[0])) for layer in layers[:-1]]
    moes = [layer.mlp for layer in layers if hasattr(layer.mlp, "gate")]
    for moe in moes:
        moe.record_routing = True
    try:
        hidden, _ = model.prefill(model.to_device(inputs))
    finally:
        for hook in hooks:
            hook.remove()
        for moe in moes:
            moe.record_routing = False
    states.append(seen["final"])
    pixels = seen["pixels"].contiguous().numpy().tobytes()
    assert hashlib.sha256(pixels).hexdigest() == meta["images_sha256_f32"]  # normalisation bit for bit
    assert (seen["vision"][:2] - ref["vision_features"]).abs().max() <= TOL
    assert (seen["projector"][:2] - ref["projector_out"]).abs().max() <= TOL
    embeds = states[0]
    assert (embeds - ref["inputs_embeds"]).abs().max() <= TOL
    positions = ref["sample_positions"]
    sampled = torch.stack([s[0, positions] for s in states])
    assert (sampled - ref["hidden_states_sampled"]).abs().max() <= TOL
    vocabulary = list(range(ref["logits_last"].shape[1]))
    head = model.output_rows(vocabulary)
    assert ((states[-1][0, positions] @ head.T) - ref["logits_sampled"][0]).abs().max() <= TOL
    logits = hidden @ head.T  # prefill + output_rows: what the runner reads
    assert (logits - ref["logits_last"]).abs().max() <= TOL
    assert logits[0].topk(5).indices.tolist() == meta["logits_last"]["top5_ids"]
    for layer, moe in enumerate(moes):
        chosen, weights = (t[0, positions] for t in moe.routing)
        order = chosen.argsort(-1)
        assert torch.equal(chosen.gather(-1, order), ref["moe_topk_idx"][layer])
        assert (weights.gather(-1, order) - ref["moe_topk_weight"][layer]).abs().max() <= TOL

    # broken: images in the other order change the layout; without the image features (the
    # `<image>` text embedding everywhere) the logits are far from the reference
    swapped = model.prepare([_fixture_request(folder, swap=True)])
    assert not torch.equal(swapped["images_spatial_crop"], ref["images_spatial_crop"])
    text_only = model.model.get_input_embeddings()(inputs["input_ids"])
    blind, _, _ = model.model.decode_layers(text_only, inputs["attention_mask"])
    assert ((blind[:, -1] @ head.T) - ref["logits_last"]).abs().max() > 1e-2


@needs_fixtures
def test_config_gaps_are_filled_with_official_defaults(tmp_path):
    """config.json omits fields equal to the class defaults; `config.full.json` resolves them."""
    from finbench.models.deepseek_vl2_model import DeepseekVL2Config

    for variant in VARIANTS:
        config = DeepseekVL2Config.from_dict(json.loads((FIXTURES / variant / "config.json").read_text()))
        full = json.loads((FIXTURES / variant / "config.full.json").read_text())
        for ours, theirs in ((config.vision, full["vision_config"]), (config.projector, full["projector_config"]),
                             (config.language, full["language_config"])):
            mismatched = {k: (v, theirs[k]) for k, v in ours.items() if k in theirs and v != theirs[k]}
            assert not mismatched, (variant, mismatched)
        assert (config.tile_tag, config.global_view_pos) == (full["tile_tag"], full["global_view_pos"])
    # broken: dropping tiny's explicit `use_mla: false` (default true) asks for MLA without its
    # dimensions; a wrong expert count leaves weights unaccounted for
    broken = tmp_path / "tiny"
    shutil.copytree(FIXTURES / "tiny", broken)
    raw = json.loads((broken / "config.json").read_text())
    del raw["language_config"]["use_mla"]
    (broken / "config.json").write_text(json.dumps(raw))
    with pytest.raises(ValueError, match="use_mla"):
        _load(broken)
    raw["language_config"]["use_mla"] = False
    raw["language_config"]["n_routed_experts"] = 6
    (broken / "config.json").write_text(json.dumps(raw))
    with pytest.raises(ValueError, match="weights do not match"):
        _load(broken)
    raw["language_config"]["n_routed_experts"] = 8
    raw["tile_tag"] = "1D"
    (broken / "config.json").write_text(json.dumps(raw))
    with pytest.raises(ValueError, match="tile_tag"):
        _load(broken)


@needs_fixtures
def test_image_token_counts_match_the_official_processor(fixture_models):
    model = fixture_models("tiny")
    rows = json.loads((FIXTURES / "token_counts.json").read_text())
    assert len(rows) == 12
    for row in rows:
        assert model.image_token_count(row["W"], row["H"]) == row["total"], row
        # the stated formula, independently
        assert row["total"] == 211 + 14 * row["tiles_h"] * (14 * row["tiles_w"] + 1)
    for row in rows[:7]:  # prepare agrees (the larger images only cost resize time)
        image = Image.new("RGB", (row["W"], row["H"]), (200, 30, 30))
        request = _user(_parts("?", 1), [image])
        prepared = model.prepare([request])
        assert int(prepared["images_seq_mask"].sum()) == row["total"] == model.count_image_tokens(prepared)
        assert prepared["images_spatial_crop"][0, 0].tolist() == [row["tiles_w"], row["tiles_h"]]
        assert prepared["tiles"].shape[0] == row["n_pixel_tiles"]
    # three or more images: no tiling, 421 tokens each, whatever their size
    sizes = [(1920, 1080), (300, 700), (640, 480)]
    three = _user(_parts("Compare them.", 3), [Image.new("RGB", s) for s in sizes])
    prepared = model.prepare([three])
    assert int(prepared["images_seq_mask"].sum()) == 3 * 421
    assert prepared["images_spatial_crop"][0].tolist() == [[1, 1]] * 3 and prepared["tiles"].shape[0] == 6
    prompts = json.loads((FIXTURES / "prompts.json").read_text())
    assert prepared["input_ids"].shape[1] == prompts["three_images"]["num_tokens"]
    # broken: an image part without an image, and a literal <image> in the text
    with pytest.raises(ValueError, match="placeholders"):
        model.prepare([ModelRequest(messages=three.messages, images=three.images[:2])])
    literal = _user(_parts("see <image> here", 0))
    with pytest.raises(ValueError, match="placeholders"):
        model.prepare([literal])


def _official_messages(case: dict) -> tuple[dict, ...]:
    roles = {"<|User|>": "user", "<|Assistant|>": "assistant"}
    messages = []
    for message in case["messages"]:
        if message["content"] == "" and message["role"] == "<|Assistant|>":
            continue  # the official empty assistant turn = our generation prompt
        messages.append({"role": roles[message["role"]], "content": message["content"]})
    return tuple(messages)


@needs_fixtures
def test_prompt_format_matches_the_official_conversations(fixture_models):
    """Each case's ids, with every image block collapsed to one `<image>`, spell the official
    `text_of_input_ids` exactly, and have its length."""
    model = fixture_models("tiny")
    tokenizer = model.tokenizer
    prompts = json.loads((FIXTURES / "prompts.json").read_text())
    for name in ("one_image", "two_images", "fixture_prompt", "three_images", "multi_turn"):
        case = prompts[name]
        images = tuple(Image.new("RGB", tuple(size), (10, 200, 10)) for size in case["image_sizes"])
        prepared = model.prepare([ModelRequest(messages=_official_messages(case), images=images)])
        ids, mask = prepared["input_ids"][0].tolist(), prepared["images_seq_mask"][0].tolist()
        assert len(ids) == case["num_tokens"], name
        collapsed = [t for i, t in enumerate(ids) if not mask[i] or not mask[i - 1]]
        assert tokenizer.decode(collapsed, skip_special_tokens=False) == case["text_of_input_ids"], name
    # HF content parts render in order, joined by newlines: [image, image, text] is the fixture's content
    parts = _user(_parts("hi", 1), [Image.new("RGB", (50, 50))])
    assert model.prompt_text(parts).endswith("<|User|>: <image>\nhi\n\n<|Assistant|>:")


# ---------------------------------------------------------------------------------------------
# The adapter contract on a make-tiny checkpoint
# ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tiny_dsv(tmp_path_factory):
    from finbench.offline.tiny import make_tiny

    return _load(make_tiny("deepseek-vl2", tmp_path_factory.mktemp("dsv") / "tiny", weights_dtype="float32"))


@pytest.fixture(scope="module")
def dsv_questions(questions):
    return questions  # conftest's synthetic FinMME set, shared with the other families' tests


DECODERS = {
    "single": lambda model, inputs, n, vocab: decode_single(model, inputs, n, vocab),
    "multi": lambda model, inputs, n, vocab: decode_multi(model, inputs, n, vocab),
    "numerical": lambda model, inputs, n, vocab: decode_numerical(model, inputs, 6, vocab),
}


def _requests(questions, images=True):
    return [finmme_request(q, None if images else []) for q in questions]


def _gap(a, b) -> float:
    rows_a, rows_b = (a.option_logprobs,) + tuple(a.step_logprobs), (b.option_logprobs,) + tuple(b.step_logprobs)
    gap = 0.0
    for row_a, row_b in zip(rows_a, rows_b, strict=True):
        for x, y in zip(row_a, row_b, strict=True):
            assert math.isinf(x) == math.isinf(y)
            gap = max(gap, 0.0 if math.isinf(x) else abs(x - y))
    return gap


def test_tiny_checkpoint_is_official_format_and_tokenizes_answers(tiny_dsv):
    folder = Path(tiny_dsv.source)
    raw = json.loads((folder / "config.json").read_text())
    assert raw["model_type"] == "deepseek_vl_v2" and tiny_dsv.family == "deepseek-vl2"
    from safetensors import safe_open

    with safe_open(str(folder / "model.safetensors"), "pt") as handle:
        names = set(handle.keys())
    assert {"image_newline", "view_seperator", "language.lm_head.weight", "vision.attn_pool.latent",
            "language.model.layers.1.mlp.gate.e_score_correction_bias"} <= names
    vocab = AnswerVocabulary.for_model(tiny_dsv)  # raises unless every answer token is single
    assert vocab.letters.shape == (2, 14)
    assert tiny_dsv.tokenizer.decode(tiny_dsv.single_token_ids([" A"])) == " A"
    assert tiny_dsv.stop_token_ids() == [tiny_dsv.tokenizer.eos_token_id]


@pytest.mark.parametrize("kind", ["single", "multi", "numerical"])
def test_batch_of_8_equals_one_by_one(tiny_dsv, dsv_questions, kind):
    chosen = [q for q in dsv_questions if q.kind == kind][:8]
    assert len(chosen) == 8
    vocab = AnswerVocabulary.for_model(tiny_dsv)
    n_options = torch.tensor([len(q.options) for q in chosen])
    batched = DECODERS[kind](tiny_dsv, tiny_dsv.prepare(_requests(chosen)), n_options, vocab)
    single = [DECODERS[kind](tiny_dsv, tiny_dsv.prepare(_requests([q])), n_options[i:i + 1], vocab)[0]
              for i, q in enumerate(chosen)]
    assert [p.answer for p in batched] == [p.answer for p in single]
    assert max(_gap(a, b) for a, b in zip(batched, single)) <= 1e-4
    if kind == "single":  # a non-degenerate model: answers depend on the question
        assert len({p.answer for p in batched}) > 1


def _mixed_batch(questions):
    """One image, two images, text only: different lengths (left padding) and tile counts."""
    first, second = decode_images(questions[0]), decode_images(questions[1])
    two = ModelRequest(messages=({"role": "user", "content": _parts("Which is larger?", 2)},),
                       images=(first[0], second[0]), answer_prefix="Answer:")
    return _requests(questions[:1]) + [two] + _requests(questions[2:3], images=False)


def _step_matches_recompute(model, requests):
    inputs = model.prepare(requests)
    assert not inputs["attention_mask"].all(), "rows must differ in length"
    _, state = model.prefill(dict(inputs))
    def ids(texts):  # the fixtures' byte-level tokenizer has no single-token " B": take the last byte
        return torch.tensor([model.tokenizer.encode(t, add_special_tokens=False)[-1] for t in texts])

    tokens = ids([" B", "7", "A"][:len(requests)])
    stepped = model.decode_step(state, tokens)
    more = ids([",", ".", "C"][:len(requests)])
    stepped_again = model.decode_step(state, more)
    ones = torch.ones(len(requests), 1, dtype=torch.long)
    extended = dict(inputs, input_ids=torch.cat([inputs["input_ids"], tokens[:, None], more[:, None]], 1),
                    attention_mask=torch.cat([inputs["attention_mask"], ones, ones], 1),
                    images_seq_mask=torch.cat([inputs["images_seq_mask"], (ones * 0).bool(), (ones * 0).bool()], 1))
    embeds = model.model.embed(extended["input_ids"], extended["images_seq_mask"], inputs["tiles"],
                               inputs["image_source"])
    full, _, _ = model.model.decode_layers(embeds, extended["attention_mask"])  # no cache: the reference
    assert (stepped - full[:, -2]).abs().max() <= 1e-4
    assert (stepped_again - full[:, -1]).abs().max() <= 1e-4
    assert not torch.allclose(stepped, stepped_again, atol=1e-3)


def test_decode_step_equals_a_full_recompute_mla(tiny_dsv, dsv_questions):
    _step_matches_recompute(tiny_dsv, _mixed_batch(dsv_questions))


@needs_fixtures
def test_decode_step_equals_a_full_recompute_mha(fixture_models):
    """The fixtures' tiny variant is the MHA one (use_mla false)."""
    model = fixture_models("tiny")
    image = Image.new("RGB", (120, 90), (90, 20, 200))
    requests = [_user(_parts("Colour?", 1), [image]), _user("What is 2 + 2?")]
    _step_matches_recompute(model, requests)


def test_generate_equals_a_cache_free_greedy_loop(tiny_dsv, dsv_questions):
    requests = _mixed_batch(dsv_questions)
    inputs = tiny_dsv.prepare(requests)
    texts, counts = tiny_dsv.generate(dict(inputs), max_new_tokens=4)
    head = tiny_dsv.model.get_output_embeddings().weight
    for row, request in enumerate(requests):
        single = tiny_dsv.prepare([request])
        ids = single["input_ids"]
        mask = single["images_seq_mask"]
        produced = []
        for _ in range(4):  # full-vocabulary forward over the whole sequence, every step
            embeds = tiny_dsv.model.embed(ids, mask, single["tiles"], single["image_source"])
            hidden, _, _ = tiny_dsv.model.decode_layers(embeds, torch.ones_like(ids))
            token = int((hidden[0, -1] @ head.T).argmax())
            produced.append(token)
            if token == tiny_dsv.tokenizer.eos_token_id:
                break
            ids = torch.cat([ids, torch.tensor([[token]])], 1)
            mask = torch.cat([mask, torch.zeros(1, 1, dtype=torch.bool)], 1)
        assert counts[row] == len(produced)
        assert texts[row] == tiny_dsv.tokenizer.decode(produced, skip_special_tokens=True)


def test_bad_configuration_fails_with_one_line(tiny_dsv, monkeypatch):
    from finbench.config.specs import LoadSpec
    from finbench.models import load_model

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ValueError, match="supports none"):
        load_model(tiny_dsv.source, LoadSpec(dtype="float32", device="cpu", quant="8bit"))
    with pytest.raises(ValueError, match="max-pixels"):
        load_model(tiny_dsv.source, LoadSpec(dtype="float32", device="cpu", max_pixels=1000))
    from finbench.models.deepseek_vl2 import DeepSeekVL2

    with pytest.raises(ValueError, match="cannot load model") as err:
        DeepSeekVL2.load("deepseek-ai/deepseek-vl2-not-cached", dtype="float32", device="cpu")
    assert "\n" not in str(err.value)


@needs_fixtures
def test_a_hub_id_loads_from_the_offline_cache(tmp_path, monkeypatch):
    """`owner/name` goes through snapshot_download: found in the cache (offline), it loads."""
    import huggingface_hub.constants

    from finbench.config.specs import LoadSpec
    from finbench.models import load_model

    snapshot = tmp_path / "models--deepseek-ai--deepseek-vl2-tiny" / "snapshots" / "0123abcd"
    snapshot.mkdir(parents=True)
    (snapshot.parent.parent / "refs").mkdir()
    (snapshot.parent.parent / "refs" / "main").write_text("0123abcd")
    for name in ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json",
                 "special_tokens_map.json", "processor_config.json"):
        shutil.copy(FIXTURES / "tiny" / name, snapshot / name)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path))
    model = load_model("deepseek-ai/deepseek-vl2-tiny", LoadSpec(dtype="float32", device="cpu"))
    assert model.family == "deepseek-vl2" and model.source == "deepseek-ai/deepseek-vl2-tiny"
    from finbench.models.identity import weights_digest

    # the cache key hashes the snapshot's files, not the (unhashable) hub id
    assert model.fingerprint()["weights"] == weights_digest(str(snapshot)) != ""


@pytest.mark.slow
def test_official_protocol_runs_end_to_end_through_the_cli(tiny_dsv, tmp_path):
    """The generate path (`--protocol official`: text first, then images) through `finbench run`;
    the constrained path runs in test_families_e2e.py."""
    import pandas as pd
    from typer.testing import CliRunner

    from finbench.cli import app
    from finbench.offline.finmme_synthetic import write_parquet

    data = write_parquet(tmp_path / "q.parquet", n_items=8, seed=2)
    done = CliRunner().invoke(app, ["run", "--model", tiny_dsv.source, "--data", str(data), "--dtype", "float32",
                                    "--device", "cpu", "--protocol", "official", "--max-new-tokens", "6",
                                    "--bootstrap", "0", "--no-progress", "--out", str(tmp_path / "run")])
    assert done.exit_code == 0, done.output[-3000:]
    samples = pd.read_parquet(tmp_path / "run" / "samples.parquet")
    results = json.loads((tmp_path / "run" / "results.json").read_text())
    assert len(samples) == 8 and (samples["error"] == "").all(), samples["error"].tolist()
    assert results["errors"]["count"] == 0 and results["n_questions"] == 8
    assert (samples["n_generated_tokens"] > 0).all()
