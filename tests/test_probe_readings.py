"""The contamination probes read what an answer says (issue 49, items 4 and 5): a negated number is
not named, in English and Chinese; the gold text keeps its sign, decimals, percent and thousands
separators, so the none-of-the-above probe tests the items it should, says how many, and refuses
in one line when it can test none."""

from __future__ import annotations

import pytest
from helpers import cli

from finbench.benchmarks import get_benchmark
from finbench.scoring.probe_scores import names_gold, normalized
from finbench.studies.probe_items import equal_to_gold

PERCENTS = ("5%", "6%", "7%", "8%")


@pytest.mark.parametrize("answer, right", [
    ("Not 5 percent.", False),
    ("not 5%", False),
    ("It isn't 5%.", False),
    ("It is 5 percent, not 6.", True),
    ("5 percent, not 6 percent", True),
    ("Revenue grew 5%, not 6%.", True),
    ("It is not 6% but 5%.", True),
    ("5%", True),
    ("The margin is 5 percent.", True),
    ("Not 6 percent; it is 5 percent.", True),
    ("不是5%", False),
    ("增长率不是5%。", False),
    ("是5%，不是6%", True),
    ("不是6%，而是5%", True),
    ("增长了5%", True),
])
def test_a_negated_number_is_not_named(answer, right):
    """docs/studies.md, open-ended: the answer is right when it names the gold option's text — the
    same number for an option that is a number — "not negated in its clause (not, no, never, n't
    before it in English …; 不, 没, 非, 未, 无 before it in Chinese …) — and no other option's".
    A number is no more than a word: "Not 5 percent." names no 5 %, and "It is 5 percent, not 6."
    names 5 % and not 6 %."""
    assert names_gold(answer, PERCENTS, "A") is right


def test_a_number_with_thousands_separators_is_one_number_in_its_clause():
    options = ("1,200 million", "1,300 million", "900 million")
    assert names_gold("Revenue was 1,200 million, not 1,300 million.", options, "A")
    assert not names_gold("Not 1,200 million.", options, "A")


def test_normalisation_keeps_signs_decimals_percent_and_thousands_separators():
    """The gold text as the none-of-the-above probe compares it: "-5 %" is not "5 %" (an option
    equal to the gold in value or text is the only reason to leave an item out)."""
    assert normalized("-5%") == "-5 %" and normalized("5%") == "5 %"
    assert normalized("\u22123.2 %") == "-3.2 %"  # the minus sign, as charts print it
    assert normalized("$1,200.50 million") == "1,200.50 million"
    assert normalized("Year-over-year, 5-6%") == "year over year 5 6 %"
    assert not equal_to_gold(["-5%", "5%", "10%", "15%"], 0)
    assert not equal_to_gold(["1,200", "1.200", "12,00", "120"], 0)
    assert equal_to_gold(["8.8%", "0.088", "1%", "2%"], 0) and equal_to_gold(["-5 %", "−5%", "1%", "2%"], 0)


def test_the_none_of_the_above_probe_tests_the_demo_items_and_says_how_many(tmp_path):
    """FAMMA's demo items have signed options (-x % beside x %): the probe tests them, and its
    note states how many of the run's choice items it tests."""
    from finbench.app.api import make_config
    from finbench.runner.run_requests import build_requests
    from finbench.studies.probe_items import probe_variants

    famma = get_benchmark("famma")
    data, _ = famma.demo.write(tmp_path, None)
    questions = [q for q in famma.load(str(data)) if not q.error]
    config = make_config(model="m", benchmark="famma", probes=("none-of-the-above",))
    requests, _ = build_requests(famma, questions, config, None, None)
    notes: list[str] = []
    found, not_probed = probe_variants(famma, questions, requests, config, None, notes, lambda base, probe: probe,
                                       ("none-of-the-above",))
    tested = sum(1 for variant, _, _ in found if variant == "none-of-the-above")
    assert tested >= 2 and "option_equal_to_gold" not in not_probed["none-of-the-above"]
    choices = sum(1 for r in requests if getattr(r, "n_options", 0) >= 2)
    assert notes[0].startswith(f"probe none-of-the-above: {tested} of {choices} choice item(s) tested")


def test_a_probe_that_can_test_no_item_is_refused_in_one_line(tiny_qwen_dir, tmp_path):
    """FCMR's options name one another ("none", "1, 2"): no item can be probed; the run is refused
    at start-up in one line, and writes nothing."""
    data, _ = get_benchmark("fcmr").demo.write(tmp_path / "data", None)
    out = tmp_path / "run"
    done = cli("run", "--model", str(tiny_qwen_dir), "--benchmark", "fcmr", "--data", str(data), "--out", str(out),
               "--probe", "none-of-the-above", "--device", "cpu", "--dtype", "float32", "--no-progress")
    assert done.returncode == 2, done.stderr[-2000:]
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "--probe none-of-the-above: none of this run's 12 choice item(s) can be tested " \
                               "(12 names other options)" in lines[0], done.stderr
    assert not (out / "results.json").exists()
