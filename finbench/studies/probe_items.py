"""The contamination probes' items (`--probe`, finbench/studies/probes.py): each choice item as a
probe asks it, or why it is not probed. Does the model read the item, or remember its answer?

- `none-of-the-above`: a constrained single-answer choice item asked again with its gold option
  taken out and "None of the above" (in the item's language: `NONE_OF_THE_ABOVE`, the benchmark's
  `language_field`) put last, so it is the right answer — and its control, the same item with a
  wrong option taken out and "None of the above" last, where it is wrong and the gold is still
  there. The two rates of picking "None of the above" (right vs wrong) separate a model that reads
  from one that picks it, or a letter, whatever the item. Items whose gold is not well defined once
  removed are not probed: a superlative or approximate question ("highest", "closest to",
  "approximately", 最) is answered by the next-best option (`superlative_or_approximate`), and an
  option equal in value to the gold (8.8 % and 0.088) still answers it (`option_equal_to_gold`).
- `open-ended`: the same items asked without their options (the benchmark's `open_prompt`), as
  free text; the answer is matched to the gold option's text by rule (scoring/probe_scores.py), or,
  with `--judge`, by the run's judge (studies/probes.py `OPEN_ENDED_JUDGING`: a generic yes/no
  prompt, its reply read by rule) in place of the benchmark's own judging of that row.

Only single-answer items are probed: a multi-answer item has no one gold text to take away or to
name. A two-option item (yes/no) is not probed with none-of-the-above: with its gold text gone,
one wrong option is left beside "None of the above", so the probe only tests elimination
(`two_options`). Items whose options already name other options ("All of the above", 以上都是), a
benchmark whose prompt shows no option apart from its text, and multi-answer items are counted
as not probed, by reason (results.json `probes[...].not_probed`); a note says how many items each
probe tests, and a probe that can test none of the run's items is refused in one line at start-up.
Whether another option equals the gold compares normalized texts that keep signs, decimals, "%" and
thousands separators (-5 % is not 5 %) and values (8.8 % is 0.088). The probe is a field of each
request (`Choose.probe`, `Generate.probe`), so of its cache key.
"""

from __future__ import annotations

import dataclasses
import math
import re
from dataclasses import replace
from typing import Any, Sequence

from finbench.benchmarks.base import Benchmark, names_other_options
from finbench.config.run_settings import for_run
from finbench.config.specs import RunConfig
from finbench.core.requests import PROBES, Choose, Generate
from finbench.core.types import OPTION_LETTERS, SINGLE, Question
from finbench.scoring.probe_scores import normalized, numeric_option
from finbench.studies.circular import raises

NONE_OF_THE_ABOVE_PROBE, OPEN_ENDED_PROBE = PROBES
NONE_OF_THE_ABOVE_CONTROL = "none-of-the-above-control"  # asked with every none-of-the-above probe
OPEN_ENDED_MAX_NEW_TOKENS = 32  # a short answer: the probe matches it to an option's text

# Questions whose gold is the best of the options shown, not a fact: with it gone the next-best
# option answers them, so "None of the above" is not the one right answer.
_RELATIVE = re.compile(
    r"\b(closest|nearest|approximate(ly)?|approx|roughly|estimated?|best|worst|most|least|highest|lowest|largest|"
    r"smallest|greatest|biggest|fastest|slowest|strongest|weakest|maximum|minimum)\b|最|约|大概|接近|近似",
    re.IGNORECASE)

# "None of the above" as a choice item in each language writes it; keyed by ISO 639-1 code, with the
# languages' English names as data sets spell them (LANGUAGE_CODES). An unknown language: English.
NONE_OF_THE_ABOVE = {
    "en": "None of the above",
    "zh": "以上都不是",
    "fr": "Aucune des réponses ci-dessus",
    "de": "Keine der obigen Antworten",
    "es": "Ninguna de las anteriores",
    "it": "Nessuna delle precedenti",
    "pt": "Nenhuma das anteriores",
    "ja": "上記のいずれでもない",
    "ko": "위의 어느 것도 아님",
}
LANGUAGE_CODES = {"english": "en", "chinese": "zh", "mandarin": "zh", "french": "fr", "german": "de",
                  "spanish": "es", "italian": "it", "portuguese": "pt", "japanese": "ja", "korean": "ko"}


def language_code(language: Any) -> str:
    """'en', 'zh', … from a code ('zh', 'zh-CN', 'ZH') or an English name ('Chinese'); '' unknown."""
    text = str(language or "").strip().lower().replace("_", "-")
    code = LANGUAGE_CODES.get(text, text.split("-")[0])
    return code if code in NONE_OF_THE_ABOVE else ""


def none_of_the_above_text(language: Any) -> str:
    """The option text in `language` (English when it is unknown or none)."""
    return NONE_OF_THE_ABOVE[language_code(language) or "en"]


def relative_question(text: Any) -> bool:
    """Whether the question asks for the best of the options shown (superlative, approximate,
    closest), not for a fact the gold states."""
    return _RELATIVE.search(str(text or "")) is not None


def option_value(option: Any) -> float | None:
    """An option's value when it is one number with at most a unit; a percentage as its fraction
    (8.8 % → 0.088), so equal values compare equal."""
    value = numeric_option(str(option or ""))
    if value is None:
        return None
    return value / 100 if "%" in str(option) or "percent" in str(option).lower() else value


def equal_to_gold(options: Sequence[str], gold: int) -> bool:
    """Whether another option has the gold's value (8.8 % vs 0.088) or its text."""
    value, text = option_value(options[gold]), normalized(options[gold])
    for j, option in enumerate(options):
        if j == gold:
            continue
        other = option_value(option)
        if normalized(option) == text or (value is not None and other is not None
                                          and math.isclose(value, other, rel_tol=1e-9, abs_tol=1e-12)):
            return True
    return False


def with_none_of_the_above(question: Question, language: Any = "", replaced: str | None = None) -> Question | None:
    """`question` with option `replaced` (a letter; the gold when None) taken out and "None of the
    above" in `language` put last; the gold letter is the gold's new letter — the last one when
    the gold was taken out. None for an item that cannot be probed so: not single-answer, no gold
    or options, or an option that already names the others."""
    letters = question.letters
    if question.kind != SINGLE or len(question.gold) != 1 or question.gold not in letters or len(letters) < 2:
        return None
    if names_other_options(question.options, letters):
        return None
    gone = letters.index(replaced or question.gold)
    kept = [j for j in range(len(letters)) if j != gone]
    options = tuple([question.options[j] for j in kept] + [none_of_the_above_text(language)])
    gold = letters.index(question.gold)
    new_gold = len(options) - 1 if gold == gone else kept.index(gold)
    return dataclasses.replace(question, options=options, gold=OPTION_LETTERS[new_gold])


def none_of_the_above_item(benchmark: Benchmark, question: Question, base: Choose, config: RunConfig,
                           think_budget: int | None, control: bool = False) -> tuple[Question, Any] | str:
    """(the probed question, its request's maker), or why the item is not probed; `control`: the
    wrong option after the gold (cyclically) is the one taken out."""
    if len(question.options) == 2:  # one wrong option beside "None of the above": elimination, not reading
        return "two_options"
    if relative_question(question.text):
        return "superlative_or_approximate"
    gold = question.letters.find(question.gold)
    if 0 <= gold < len(question.options) and equal_to_gold([str(o) for o in question.options], gold):
        return "option_equal_to_gold"
    language = question.meta.get(benchmark.language_field, "") if benchmark.language_field else ""
    wrong = question.letters[(gold + 1) % len(question.letters)] if control and gold >= 0 else None
    probed = with_none_of_the_above(question, language, wrong)
    if probed is None:
        return "names_other_options"
    name = NONE_OF_THE_ABOVE_CONTROL if control else NONE_OF_THE_ABOVE_PROBE
    try:
        request = replace(for_run(benchmark.request(probed, config.protocol), config, think_budget), probe=name)
    except Exception as err:  # noqa: BLE001 — raised again by the maker: that variant's error
        return probed, raises(err)
    if request.prompt == base.prompt:  # the prompt does not show Question.options apart from the text
        return "options_not_rendered"
    return probed, lambda: request


def open_ended_item(benchmark: Benchmark, question: Question, base: Choose, config: RunConfig,
                    think_budget: int | None) -> tuple[Question, Any] | str:
    """(the question, its free-generation request's maker), or why the item is not probed."""
    if names_other_options(question.options, question.letters):  # "All of the above" has no text to say
        return "names_other_options"
    try:
        prompt = benchmark.open_prompt(question)
    except Exception as err:  # noqa: BLE001 — that variant's error
        return question, raises(err)
    if prompt is None:
        return "options_not_rendered"
    request = Generate(prompt, max_new_tokens=OPEN_ENDED_MAX_NEW_TOKENS, probe=OPEN_ENDED_PROBE)
    return question, lambda: for_run(request, config, think_budget)


def probe_variants(benchmark: Benchmark, questions: Sequence[Question], requests: Sequence[Any],
                   config: RunConfig, think_budget: int | None, notes: list[str], variant: Any,
                   probes: Sequence[str]) -> tuple[list[tuple[Any, Question, Any]], dict[str, dict[str, int]]]:
    """((variant, probed question, its request's maker) for every probe of `probes` of every
    constrained single-answer choice item, {probe: {reason: items not probed}}); `variant(base,
    probe)` makes the Variant (studies/probes.py). A note says how many items each probe tests; a
    probe that can test none is refused (one ValueError line, at start-up: nothing is written)."""
    out: list[tuple[Any, Question, Any]] = []
    not_probed: dict[str, dict[str, int]] = {}
    choices = [i for i, r in enumerate(requests) if isinstance(r, Choose) and r.n_options >= 2]
    if probes and not choices:
        raise ValueError(f"--probe {','.join(probes)}: this run has no constrained choice item to test")
    multi = [i for i in choices if questions[i].kind != SINGLE or len(questions[i].gold) != 1]
    single = [i for i in choices if i not in set(multi)]
    for probe in probes:
        skipped = {"multi_answer": len(multi)} if multi else {}
        made = none_of_the_above_item if probe == NONE_OF_THE_ABOVE_PROBE else open_ended_item
        tested = 0
        for i in single:
            found = made(benchmark, questions[i], requests[i], config, think_budget)
            if isinstance(found, str):
                skipped[found] = skipped.get(found, 0) + 1
                continue
            question, make = found
            tested += 1
            out.append((variant(i, probe), question, make))
            if probe == NONE_OF_THE_ABOVE_PROBE:  # the control: the same swap on a wrong option
                question, make = none_of_the_above_item(benchmark, questions[i], requests[i], config,
                                                        think_budget, control=True)
                out.append((variant(i, NONE_OF_THE_ABOVE_CONTROL), question, make))
        not_probed[probe] = skipped
        reasons = ", ".join(f"{n} {reason.replace('_', ' ')}" for reason, n in skipped.items())
        if not tested:  # a probe that tests nothing would report a number about nothing
            raise ValueError(f"--probe {probe}: none of this run's {len(choices)} choice item(s) can be tested "
                             f"({reasons})")
        notes.append(f"probe {probe}: {tested} of {len(choices)} choice item(s) tested"
                     + (f"; not probed: {reasons}" if skipped else ""))
    return out, not_probed
