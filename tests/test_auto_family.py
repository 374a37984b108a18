"""The generic family (models/auto.py) on tiny offline builds of the eight architectures it is
tested on: every FinMME item answered through `finbench run` under both protocols, batch 1 against
batch 8, and constrained probabilities against a plain transformers forward (a full-vocabulary
softmax restricted to the option letters). Thinking, sweeps and refusals: test_auto_family_options.py."""

from __future__ import annotations

import pytest
import torch
from auto_helpers import ARCHITECTURES, N_ITEMS, assert_same_probabilities, run, write_finmme40
from helpers import finmme_request, sharpened_tiny_dir


@pytest.fixture(scope="module")
def finmme40(tmp_path_factory):
    return write_finmme40(tmp_path_factory.mktemp("data40"))


@pytest.fixture(scope="module", params=ARCHITECTURES)
def arch_dir(request, tmp_path_factory):
    return request.param, sharpened_tiny_dir(tmp_path_factory, request.param)


def _reference_option_probs(model, question) -> list[float]:
    """A plain forward of the adapter's prompt through the transformers module: the whole
    vocabulary's softmax at the last position, each option's two spellings added, renormalised
    over the item's options (what the constrained decoder must give)."""
    request = finmme_request(question)
    inputs = model.processor(text=[model.prompt_text(request)], images=[list(request.images)] or None,
                             return_tensors="pt")
    inputs = {k: v.to(model.dtype) if v.is_floating_point() else v for k, v in inputs.items() if torch.is_tensor(v)}
    with torch.no_grad():
        probs = model.model(**inputs).logits[0, -1].double().softmax(-1)
    letters = [chr(ord("A") + i) for i in range(len(question.options))]
    per_option = torch.stack([probs[model.single_token_ids([c])[0]] + probs[model.single_token_ids([" " + c])[0]]
                              for c in letters])
    return (per_option / per_option.sum()).tolist()


@pytest.mark.slow
def test_every_item_answered_and_constrained_probabilities_equal_a_plain_forward(arch_dir, finmme40, tmp_path):
    """All 40 items under constrained and official with no error; batch 8 (the CPU default) equals
    batch 1; the first single-choice items' option probabilities equal the plain forward's."""
    from finbench.benchmarks import finmme
    from finbench.config.specs import LoadSpec
    from finbench.models import load_model

    arch, model_dir = arch_dir
    results, constrained = run(model_dir, finmme40, tmp_path / "constrained")
    assert results["fingerprint"]["family"] == "auto" or arch == "internvl"
    assert len(constrained) == N_ITEMS and (constrained["error"] == "").all(), constrained["error"].tolist()
    _, official = run(model_dir, finmme40, tmp_path / "official", "--protocol", "official", "--max-new-tokens", "6")
    assert len(official) == N_ITEMS and (official["error"] == "").all(), official["error"].tolist()
    assert (official["n_generated_tokens"] <= 6).all() and (official["n_generated_tokens"] > 0).all()
    _, one_by_one = run(model_dir, finmme40, tmp_path / "b1", "--batch-size", "1", "--limit", "12")
    batched = constrained.set_index("id").loc[one_by_one["id"]]
    assert list(batched["answer"]) == list(one_by_one["answer"])
    assert_same_probabilities(batched, one_by_one)

    model = load_model(str(model_dir), LoadSpec(dtype="float32", device="cpu", family="auto"))
    questions = {q.id: q for q in finmme.load_questions(finmme40)}
    singles = constrained[constrained["kind"] == "single"].head(3)
    assert len(singles) == 3
    for qid, probs in zip(singles["id"], singles["option_probs"]):
        want = _reference_option_probs(model, questions[qid])
        assert max(abs(x - y) for x, y in zip(probs, want)) <= 1e-5, (qid, probs, want)
