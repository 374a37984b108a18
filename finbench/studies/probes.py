"""Contamination probes (`--probe none-of-the-above,open-ended`): every constrained single-answer
choice item asked again with its gold option's text replaced by "None of the above" (with a
control that replaces a wrong option), or without its options as free text — does the model read
the item, or remember its answer? Which items each probe asks and why others are not probed:
studies/probe_items.py; the open-ended answers matched to the gold text by rule, or with --judge by
the generic yes/no judge below (`OPEN_ENDED_JUDGING`); scored in scoring/probe_scores.py."""

from __future__ import annotations

import re
from typing import Any, Mapping, Sequence

from finbench.config.options import Option
from finbench.config.specs import RunConfig
from finbench.core.judging import Judgement, Judging
from finbench.core.requests import PROBES, Generate, Prompt, Request, user_message
from finbench.core.types import OPTION_LETTERS, SINGLE, Prediction, Question
from finbench.studies.base import Column, Expanded, Study, StudyRows, Variant
from finbench.studies.cells import interval, pct, signed
from finbench.studies.image_ablation import check_names

NONE_OF_THE_ABOVE_PROBE, OPEN_ENDED_PROBE = PROBES
HEADLINE = ("n", "n_not_probed", "base_accuracy", "accuracy", "diff", "kept_when_right", "scored_by")
MEANINGS = {NONE_OF_THE_ABOVE_PROBE: "the gold option taken out and \"None of the above\" (in the item's language) "
                                     "put last: accuracy is the share that picked it; its control takes out a wrong "
                                     "option instead, so \"None of the above\" is wrong there. Only the gap between "
                                     "the two rates of picking it says the model reads the options",
            OPEN_ENDED_PROBE: "asked without its options; the free answer right when it names the gold option's text "
                              "(or its number) and no other option's, by rule or, scored by judge, as the --judge "
                              "model says"}


def check(probes: Any, config: RunConfig) -> None:
    """--probe, checked with the other options (one ValueError line)."""
    check_names("--probe", "probe", probes, PROBES)
    if probes and config.protocol != "constrained":
        raise ValueError("--probe applies to the constrained protocol: the official prompts write the options "
                         "themselves")


# ---- the open-ended probe's judge (--judge) --------------------------------------------------------
JUDGE_MAX_NEW_TOKENS = 8  # "yes" or "no"
_VERDICT = re.compile(r"\b(yes|no|true|false)\b", re.IGNORECASE)


def open_ended_judge_prompt(question: Question, answer: str) -> str:
    """The generic judge prompt: does the free answer name the same thing as the gold option's
    text? The other options are shown as wrong, so an answer that lists several is no match."""
    index = OPTION_LETTERS.find(question.gold)
    others = [o for j, o in enumerate(question.options) if j != index]
    return ("You check a short answer against a reference answer.\n"
            f"Question: {question.text.strip()}\n"
            f"Reference answer: {question.options[index]}\n"
            + (f"Other choices (wrong): {' | '.join(others)}\n" if others else "")
            + f"Candidate answer: {answer.strip()}\n"
            "Does the candidate answer give the reference answer (the same thing, or the same number; "
            "wording, units and formatting aside) and none of the other choices? Reply with one word: yes or no.")


def open_ended_judge_requests(question: Question, prediction: Prediction) -> list[Request]:
    """One text request per open-ended probe row (no image: the match is of two texts)."""
    if question.kind != SINGLE or len(question.gold) != 1 or not 0 <= OPTION_LETTERS.find(question.gold) < len(
            question.options):
        return []
    text = open_ended_judge_prompt(question, prediction.generated_text or prediction.answer)
    return [Generate(Prompt((user_message(text),), ()), max_new_tokens=JUDGE_MAX_NEW_TOKENS)]


def judge_verdict(reply: str) -> bool | None:
    """The reply's first yes/no (or JSON true/false), by rule; None when it has none."""
    found = _VERDICT.search(str(reply or ""))
    return None if found is None else found.group(1).lower() in ("yes", "true")


def read_open_ended_judgement(question: Question, prediction: Prediction, replies: Sequence[str]) -> Judgement:
    """1 for yes, 0 for no; a reply with neither scores 0, as the benchmarks' official readings do."""
    if not replies:
        return None, {}
    verdict = judge_verdict(replies[0])
    return float(bool(verdict)), {"probe": OPEN_ENDED_PROBE, "verdict": verdict, "parsed": verdict is not None}


# how a judge model judges an open-ended probe row, in place of the benchmark's own judging
OPEN_ENDED_JUDGING = Judging(open_ended_judge_requests, read_open_ended_judgement)


# ---- the study ----------------------------------------------------------------------------------
def _cell(found: dict[str, Any]) -> str:
    """Accuracy (probe − base), and "by judge" where the --judge model matched the answers: a
    judged probe and a rule-matched one are not the same measurement."""
    judged = " by judge" if found.get("scored_by") == "judge" else ""
    return f"{pct(found.get('accuracy'))} ({signed(found.get('diff'))}){judged}"


def _control_text(found: dict[str, Any]) -> str:
    """The none-of-the-above probe beside its control: the rate of picking "None of the above"
    where it is right and where it is wrong (×100)."""
    if "picks_none_when_right" not in found:
        return ""
    return (f" · picks \"None of the above\" {pct(found['picks_none_when_right'])} when right, "
            f"{pct(found.get('picks_none_when_wrong'))} when wrong (control, n "
            f"{(found.get('control') or {}).get('n', 0)})")


class Probes(Study):
    name = "probe"
    key = "probes"
    option = Option("probes", (), "Contamination probes of the constrained single-answer choice items: "
                    "none-of-the-above (the gold option's text replaced by \"None of the above\"), open-ended (asked "
                    "without options); comma-separated or repeated; results.json['probes'].", many=True, check=check,
                    spec="studies", sweep=True, flag="--probe")
    columns = (Column("probe", "", "str — none-of-the-above | open-ended ('' for the other studies' rows); "
                    "open-ended rows: `answer` is the free text, `correct` whether it names the gold option's text"),)

    def expand(self, benchmark: Any, questions: Sequence[Question], requests: Sequence[Any], config: RunConfig,
               think_budget: int | None, notes: list[str]) -> Expanded:
        """A variant per probe of every probed item (and the none-of-the-above control); the state
        is {probe: {reason: items not probed}}."""
        from finbench.studies.probe_items import probe_variants

        found, not_probed = probe_variants(benchmark, questions, requests, config, think_budget, notes,
                                           lambda base, probe: self.variant(base, f"probe-{probe}", probe=probe),
                                           self.value(config))
        return Expanded(found, not_probed)

    def judging(self, variant: Variant, config: RunConfig) -> Judging | None:
        return OPEN_ENDED_JUDGING if variant.get("probe") == OPEN_ENDED_PROBE else None

    def rescore(self, rows: Any, config: RunConfig) -> Any:
        """The open-ended rows' free answers matched to the gold text (or judged)."""
        from finbench.scoring.probe_scores import probe_verdicts

        return probe_verdicts(rows, rows["correct"], bool(config.judging.judge))

    def summary(self, found: StudyRows) -> dict[str, Any]:
        from finbench.scoring.probe_scores import probe_summary

        return probe_summary(found.samples, found.rows, self.value(found.config), found.state or {},
                             bool(found.config.judging.judge))

    def headline(self, block: Any) -> Any:
        return {probe: {k: f.get(k) for k in HEADLINE} for probe, f in block.items()} if block else None

    def console_lines(self, block: Any, benchmark: str | None = None) -> list[str]:
        return [f"probe {probe}: no item probed (see the notes)" if not f["n"]
                else f"probe {probe} ({f['n']} items, {f['n_not_probed']} not probed, scored by "
                     f"{f.get('scored_by') or 'rule'}, ×100): accuracy {pct(f['base_accuracy'])} → {pct(f['accuracy'])} "
                     f"({signed(f['diff'])}{interval(f.get('paired'))}) · kept when right {pct(f['kept_when_right'])}"
                     + _control_text(f) for probe, f in (block or {}).items()]

    def section(self, block: Any, benchmark: str | None = None) -> dict[str, Any] | None:
        if not block:
            return None
        rows = [[probe, str(f["n"]), str(f["n_not_probed"]), pct(f["base_accuracy"]), pct(f["accuracy"]),
                 signed(f["diff"]), interval(f.get("paired")).removeprefix(", 95% CI ") or "–",
                 pct(f["kept_when_right"]), pct(f.get("picks_none_when_right")), pct(f.get("picks_none_when_wrong")),
                 f.get("scored_by") or "rule"] for probe, f in block.items()]
        skipped = sorted({reason for f in block.values() for reason in f.get("not_probed", {})})
        return {"id": "probes", "title": "Contamination probes (accuracy ×100)",
                "tables": [{"header": ["probe", "n", "not probed", "base accuracy", "probe accuracy", "probe − base",
                                       "95% CI (clustered)", "kept when right", "picks none when right",
                                       "picks none when wrong (control)", "scored by"], "rows": rows}],
                "note": "Single-answer choice items asked again: " + "; ".join(
                    f"{probe}: {MEANINGS.get(probe, probe)}" for probe in block) + ". Not probed: "
                    + (", ".join(reason.replace("_", " ") for reason in skipped) or "none") + "."}

    def compare_columns(self, headlines: Mapping[str, Any]) -> tuple[list[str], list[list[str]]]:
        probes = sorted({probe for h in headlines.values() for probe in (h or {})})
        cells = [[_cell((h or {}).get(probe) or {}) for probe in probes] for h in headlines.values()]
        return [f"{probe}: accuracy ×100 (probe − base)" for probe in probes], cells


STUDY = Probes()
