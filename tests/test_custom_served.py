"""The same custom file through a served model (`--model http://…`: a real `transformers serve` on
127.0.0.1 serving the tiny checkpoint) and in process: every row answered with no error in both, the
gold read alike, accuracy = mean(correct) in both, the open answers' greedy text the same, and
`finbench compare` reads the two runs. A served model reads single choices (the decision endpoint),
so the file holds what it can read: choices, true/false, yes/no, 是/否 and open answers."""

from __future__ import annotations

import json
import re

import pandas as pd
import pytest
from helpers import cli
from served_server import start_server

from finbench.offline import custom_synthetic as forms

pytestmark = pytest.mark.slow
READABLE = ("s1", "s2", "b1", "b2", "b3", "o1")  # rows a served model reads under the constrained protocol


@pytest.fixture(scope="module")
def server(tiny_qwen_dir, tmp_path_factory):
    started = start_server(tiny_qwen_dir, tmp_path_factory.mktemp("serve") / "server.log")
    yield started
    started.stop()


def _run(model, data, out, *local):
    done = cli("run", "--model", str(model), "--benchmark", "custom", "--data", str(data), "--out", str(out),
               "--batch-size", "1", "--no-progress", "--bootstrap", "0", "--max-new-tokens", "12", *local)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return json.loads((out / "results.json").read_text()), pd.read_parquet(out / "samples.parquet")


def _printable(text: str, tokenizer) -> str:
    """The reply's printable ASCII: a random model's tokens split UTF-8 sequences, which the server
    and finbench decode to different replacement characters, and the server keeps special tokens."""
    for token in tokenizer.all_special_tokens + [t.content for t in tokenizer.added_tokens_decoder.values() if t.special]:
        text = text.replace(token, "")
    return re.sub(r"[^\x20-\x7e]", "", text)


def test_the_same_custom_file_served_and_in_process(server, tiny_qwen_dir, tiny_model, tmp_path):
    written = forms.write_csv(tmp_path / "data")
    frame = pd.read_csv(written, dtype=str, keep_default_na=False)
    data = written.with_name("readable.csv")
    frame[frame["id"].isin(READABLE)].to_csv(data, index=False)
    served_results, served = _run(server.url, data, tmp_path / "served")
    local_results, local = _run(tiny_qwen_dir, data, tmp_path / "local", "--device", "cpu", "--dtype", "float32")
    for results, samples in ((served_results, served), (local_results, local)):
        assert results["errors"]["count"] == 0 and (samples["error"] == "").all()
        assert samples["id"].tolist() == list(READABLE)
        assert results["scores"]["accuracy"] == pytest.approx(samples["correct"].mean())
    assert served[["kind", "gold"]].values.tolist() == local[["kind", "gold"]].values.tolist()
    assert served_results["fingerprint"]["read_by"] == {"single": "decision endpoint"}  # each kind's reading
    choice = served["kind"] == "single"
    assert (served.loc[choice, "read_by"] == "decision endpoint").all()
    assert served.loc[choice, "answer"].isin(["A", "B", "C", "D"]).all()
    assert [_printable(t, tiny_model.tokenizer) for t in served.loc[~choice, "raw_output"]] == \
        [_printable(t, tiny_model.tokenizer) for t in local.loc[~choice, "raw_output"]]  # greedy open answers alike
    compared = cli("compare", str(tmp_path / "local"), str(tmp_path / "served"), "--bootstrap", "0",
                   "--out", str(tmp_path / "compare.json"))
    assert compared.returncode == 0, compared.stderr[-2000:]
    assert json.loads((tmp_path / "compare.json").read_text())["n_shared"] == len(READABLE)
