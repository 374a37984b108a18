"""`load_model(source, spec, …)`: the loader takes the run's `LoadSpec` whole (at most six
parameters), and every loading field of the spec reaches the family's loader and its refusal
exactly as the keywords it replaces did; what start-up resolved (the rank's device, the chat
template's text, the checkpoint record) is passed beside the spec. The tiny Qwen2.5-VL is loaded
through the spec as a Python API caller would."""

from __future__ import annotations

import inspect

import pytest

import finbench.models as models
from finbench.config.specs import LoadSpec
from finbench.models import families
from finbench.models.contract import Capabilities
from finbench.models.families import Checkpoint
from finbench.models.fast_paths import FastPaths


class Loaded:
    """What the recording family returns: a model that remembers the chat template it was given."""

    template: str | None = None

    def use_chat_template(self, text: str) -> None:
        self.template = text


class Recording:
    """A family whose loader records what it is asked, and whose capabilities are set per test."""

    family = "recording"
    capabilities = Capabilities()
    calls: list[tuple[str, dict]] = []

    @classmethod
    def capabilities_for(cls, model_type: str, source: str) -> Capabilities:
        return cls.capabilities

    @classmethod
    def load(cls, source: str, **options) -> Loaded:
        cls.calls.append((source, options))
        return Loaded()


@pytest.fixture()
def recording(monkeypatch):
    """The recording family, found by `read_checkpoint` (which records the family asked for)."""
    asked: list[tuple[str, str | None]] = []

    def read_checkpoint(source: str, family: str | None = None) -> Checkpoint:
        asked.append((source, family))
        return Checkpoint(source, Recording, "recording")

    monkeypatch.setattr(families, "read_checkpoint", read_checkpoint)
    monkeypatch.setattr(Recording, "calls", [])
    monkeypatch.setattr(Recording, "capabilities", Capabilities())
    return asked


def test_load_model_takes_the_load_spec_whole_in_at_most_six_parameters():
    parameters = list(inspect.signature(models.load_model).parameters.values())
    assert len(parameters) <= 6
    assert [p.name for p in parameters[:2]] == ["source", "spec"] and parameters[1].default == LoadSpec()
    assert all(p.kind is p.KEYWORD_ONLY for p in parameters[2:])  # what start-up resolved, by name


def test_every_loading_field_of_the_spec_reaches_the_family_s_loader(recording):
    spec = LoadSpec(dtype="bfloat16", device="cuda:7", device_map="auto", quant="8bit", quant_vision=True,
                    allow_dequantized=True, max_pixels=12345, device_preprocess=True, fast_paths=False,
                    revision="v1", trust_remote_code=True, attn_implementation="eager", family="recording")
    checkpoint = Checkpoint("owner/model", Recording, "recording")
    model = models.load_model("owner/model", spec, device="cpu", chat_template="{{ messages }}",
                              checkpoint=checkpoint)
    assert recording == []  # the record start-up read is used: config.json is not read again
    assert model.template == "{{ messages }}"
    source, options = Recording.calls[-1]
    assert source == "owner/model"
    assert options == {"dtype": "bfloat16", "device": "cpu", "quant": "8bit", "max_pixels": 12345, "declared": None,
                       "revision": "v1", "trust_remote_code": True, "attn_implementation": "eager",
                       "device_map": "auto", "device_preprocess": True, "fast_paths": FastPaths.reference(),
                       "quant_vision": True, "allow_dequantized": True}
    models.load_model("owner/model", spec, checkpoint=checkpoint)  # no device resolved: the spec's
    assert Recording.calls[-1][1]["device"] == "cuda:7"
    # the default spec: the keywords' old defaults, and nothing passed that was not asked for
    assert models.load_model("owner/model").template is None
    assert Recording.calls[-1][1] == {"dtype": "auto", "device": "auto", "quant": "none", "max_pixels": None,
                                      "declared": None}
    assert recording == [("owner/model", None)]


def test_the_spec_s_family_and_options_are_refused_from_the_record_before_any_weights(recording):
    Recording.capabilities = Capabilities(hub_options=False, pixel_budget=False, chat_template=False,
                                          quantization=("none",))
    refusals = [(LoadSpec(family="recording", revision="v1"), None, "--revision: not supported for recording"),
                (LoadSpec(device_map="auto"), None, "--device-map: not supported for recording"),
                (LoadSpec(max_pixels=1000), None, "--max-pixels applies to Qwen-style processors"),
                (LoadSpec(quant="8bit"), None, "--quant 8bit: recording supports none"),
                (LoadSpec(), "{{ messages }}", "--chat-template: recording prompts use its fixed")]
    for spec, template, line in refusals:
        with pytest.raises(ValueError, match=line):
            models.load_model("owner/model", spec, chat_template=template)
    assert Recording.calls == [] and recording[0] == ("owner/model", "recording")
    assert recording[1:] == [("owner/model", None)] * 4
    models.load_model("owner/model", LoadSpec(trust_remote_code=True))  # not a hub option the family may refuse
    assert Recording.calls[-1][1]["trust_remote_code"] is True


def test_the_tiny_model_loads_through_a_spec(tiny_qwen_dir):
    import torch

    model = models.load_model(str(tiny_qwen_dir), LoadSpec(dtype="bfloat16", device="cpu"))
    assert model.model.dtype == torch.bfloat16 and str(model.device) == "cpu"
    assert model.fingerprint()["dtype"] == "bfloat16"
    model = models.load_model(str(tiny_qwen_dir), LoadSpec(dtype="float32", device="cuda"), device="cpu")
    assert model.model.dtype == torch.float32 and str(model.device) == "cpu"  # the resolved device wins
