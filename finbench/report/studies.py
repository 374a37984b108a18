"""The robustness studies as the reports show them: one section each (majority and prior baselines,
circular evaluation, image ablation, contamination probes), built once from results.json and rendered by report.html,
report.md and the console alike. Values ×100 where a header says so (accuracies, rates, shares);
`retained` is a ratio (ablated / base)."""

from __future__ import annotations

from typing import Any

from finbench.report.format import metric_label, pct
from finbench.report.sampling import sampling_line, sampling_section

BASELINE_NAMES = {"majority_answer": "majority answer", "always_a": "always A",
                  "most_frequent_position": "most frequent position"}
MAX_SHOWN = 30  # characters of a majority answer's text in a table cell


def _cut(text: Any) -> str:
    text = "" if text is None else str(text)
    return text if len(text) <= MAX_SHOWN else text[:MAX_SHOWN - 1] + "…"


def _with(value: Any, label: Any) -> str:
    return pct(value) + (f" ({_cut(label)})" if label not in (None, "") and value is not None else "")


def _signed(value: Any) -> str:
    return "–" if value is None else f"{100 * value:+.2f}"


def _ratio(value: Any) -> str:
    return "–" if value is None else f"{value:.3f}"


def _kept(value: Any) -> str:
    """A ratio in a line whose numbers are ×100: as a percentage of the base, never a bare 1.200."""
    return "retained –" if value is None else f"{100 * value:.1f} % of the base"


def baseline_line(results: dict[str, Any]) -> str | None:
    """The line beside the headline: the best prior baseline, the model, the margin (×100)."""
    found = (results.get("majority_baseline") or {}).get("all")
    if not found or found.get("best_baseline") is None:
        return None
    return (f"best prior baseline: {BASELINE_NAMES[found['best_baseline']]} {pct(found['best_accuracy'])} · model "
            f"accuracy {pct(found['model_accuracy'])} · above it {_signed(found['above_best'])} (×100, "
            f"{found['n']} choice and numerical items, per question type)")


def study_lines(results: dict[str, Any]) -> list[str]:
    """One console line per study the run made (circular evaluation, image ablation)."""
    lines = []
    circular = results.get("circular")
    if circular:
        lines.append(f"circular evaluation (K {circular['k']}): no item rotated (see the notes)" if not circular["n"]
                     else f"circular evaluation (K {circular['k']}, {circular['n']} items, ×100): accuracy "
                          f"{pct(circular['base_accuracy'])} → {pct(circular['circular_accuracy'])} when right in "
                          f"every order · position bias {pct(circular['position_bias'])} · option consistency "
                          f"{pct(circular['option_consistency'])}")
    for mode, found in (results.get("image_ablation") or {}).items():
        label = metric_label(results.get("benchmark"), found["metric"])
        lines.append(f"image ablation {mode} ({found['n']} items, ×100): {label} {pct(found['base_score'])} → "
                     f"{pct(found['score'])} ({_kept(found['retained'])}) · accuracy "
                     f"{pct(found['base_accuracy'])} → {pct(found['accuracy'])} ({_kept(found['retained_accuracy'])})")
    for probe, found in (results.get("probes") or {}).items():
        lines.append(f"probe {probe}: no item probed (see the notes)" if not found["n"]
                     else f"probe {probe} ({found['n']} items, {found['n_not_probed']} not probed, scored by "
                          f"{found.get('scored_by') or 'rule'}, ×100): accuracy "
                          f"{pct(found['base_accuracy'])} → {pct(found['accuracy'])} ({_signed(found['diff'])}"
                          f"{_interval(found.get('paired'))}) · kept when right {pct(found['kept_when_right'])}"
                          + _control_text(found))
    return lines + [line for line in [sampling_line(results)] if line]


def _interval(paired: Any) -> str:
    ci = (paired or {}).get("ci_diff") or {}
    return "" if ci.get("low") is None else f", 95% CI {_signed(ci['low'])} … {_signed(ci['high'])}"


def _control_text(found: dict[str, Any]) -> str:
    """The none-of-the-above probe beside its control: the rate of picking "None of the above"
    where it is right and where it is wrong (×100)."""
    if "picks_none_when_right" not in found:
        return ""
    return (f" · picks \"None of the above\" {pct(found['picks_none_when_right'])} when right, "
            f"{pct(found.get('picks_none_when_wrong'))} when wrong (control, n {(found.get('control') or {}).get('n', 0)})")


PROBE_MEANINGS = {"none-of-the-above": "the gold option taken out and \"None of the above\" (in the item's "
                                       "language) put last: accuracy is the share that picked it; its control takes "
                                       "out a wrong option instead, so \"None of the above\" is wrong there. Only the "
                                       "gap between the two rates of picking it says the model reads the options",
                  "open-ended": "asked without its options; the free answer right when it names the gold "
                                "option's text (or its number) and no other option's, by rule or, scored by "
                                "judge, as the --judge model says"}


def _probe_section(probes: dict[str, Any]) -> dict[str, Any]:
    rows = [[probe, str(f["n"]), str(f["n_not_probed"]), pct(f["base_accuracy"]), pct(f["accuracy"]),
             _signed(f["diff"]), _interval(f.get("paired")).removeprefix(", 95% CI ") or "–",
             pct(f["kept_when_right"]), pct(f.get("picks_none_when_right")), pct(f.get("picks_none_when_wrong")),
             f.get("scored_by") or "rule"] for probe, f in probes.items()]
    skipped = sorted({reason for f in probes.values() for reason in f.get("not_probed", {})})
    return {"id": "probes", "title": "Contamination probes (accuracy ×100)",
            "tables": [{"header": ["probe", "n", "not probed", "base accuracy", "probe accuracy", "probe − base",
                                   "95% CI (clustered)", "kept when right", "picks none when right",
                                   "picks none when wrong (control)", "scored by"], "rows": rows}],
            "note": "Single-answer choice items asked again: " + "; ".join(
                f"{probe}: {PROBE_MEANINGS.get(probe, probe)}" for probe in probes) + ". Not probed: "
                + (", ".join(reason.replace("_", " ") for reason in skipped) or "none") + "."}


def study_sections(results: dict[str, Any]) -> list[dict[str, Any]]:
    """Sections {id, title, tables: [{header, rows}], note} in report order."""
    sections = []
    majority = results.get("majority_baseline")
    if majority and majority.get("by_type"):
        rows = [[name, str(g["n"]), _with(g["majority_answer_accuracy"], g.get("majority_answer")),
                 pct(g["always_a_accuracy"]),
                 _with(g["most_frequent_position_accuracy"], g.get("most_frequent_position")),
                 pct(g["model_accuracy"]), BASELINE_NAMES.get(g["best_baseline"], "–"), _signed(g["above_best"])]
                for name, g in [*majority["by_type"].items(), ("all", majority["all"])]]
        sections.append({
            "id": "majority-baseline", "title": "Majority and prior baselines (accuracy ×100)",
            "tables": [{"header": [majority["column"], "n", "majority answer", "always A", "most frequent position",
                                   "model", "best baseline", "model − best"], "rows": rows}],
            "note": "Per question type: always the type's most frequent gold answer (option text or number), always "
                    "A, always the type's most frequent gold letter(s). These priors know this run's gold "
                    "distribution and nothing of the items; 'all' gives each item its type's prior."})
    circular = results.get("circular")
    if circular:
        tables = [{"header": ["metric", "value ×100"], "rows": [
            ["accuracy in the published order", pct(circular["base_accuracy"])],
            ["circular accuracy (right in every order)", pct(circular["circular_accuracy"])],
            ["position bias (same letter in every order)", pct(circular["position_bias"])],
            ["option consistency (same option in every order)", pct(circular["option_consistency"])]]}]
        if circular.get("pick_rate"):
            tables.append({"header": ["position", "pick rate ×100", "a position-blind pick ×100"],
                           "rows": [[letter, pct(rate), pct(circular["chance_pick_rate"].get(letter))]
                                    for letter, rate in circular["pick_rate"].items()]})
        if circular.get("by_domain"):
            tables.append({"header": ["domain", "n", "accuracy ×100", "circular accuracy ×100"],
                           "rows": [[d, str(g["n"]), pct(g["base_accuracy"]), pct(g["circular_accuracy"])]
                                    for d, g in circular["by_domain"].items()]})
        sections.append({
            "id": "circular", "title": f"Circular evaluation (K = {circular['k']})", "tables": tables,
            "note": f"{circular['n']} choice items, each asked in its published order and rotated by 1…k−1 positions "
                    "(k = min(K, its options); the gold moves with its option). Position bias and option "
                    f"consistency are over the {circular.get('n_consistency', 0)} items answered without an error in "
                    "every order: a model that always picks A has position bias 100 and option consistency 0."})
    ablation = results.get("image_ablation")
    if ablation:
        summary = [[mode, str(f["n"]), metric_label(results.get("benchmark"), f["metric"]), pct(f["base_score"]),
                    pct(f["score"]), _ratio(f["retained"]), pct(f["base_accuracy"]), pct(f["accuracy"]),
                    _ratio(f["retained_accuracy"])] for mode, f in ablation.items()]
        domains = [[d, mode, str(g["n"]), pct(g["base"]), pct(g["ablated"]), _ratio(g["retained"])]
                   for mode, f in ablation.items() for d, g in f.get("by_domain", {}).items()]
        tables = [{"header": ["mode", "n", "headline", "base ×100", "ablated ×100", "retained", "base accuracy ×100",
                              "ablated accuracy ×100", "accuracy retained"], "rows": summary}]
        if domains:
            tables.append({"header": ["domain", "mode", "n", "base accuracy ×100", "ablated accuracy ×100",
                                      "retained"], "rows": domains})
        sections.append({
            "id": "image-ablation", "title": "Image ablation", "tables": tables,
            "note": "The items that show an image, asked again with every image white (blank), uniform noise seeded "
                    "by the image (noise) or removed from the prompt (none); retained = ablated / base on the same "
                    "items: what survives without the chart is answered from the text alone."})
    if results.get("probes"):
        sections.append(_probe_section(results["probes"]))
    return sections + [section for section in [sampling_section(results)] if section]


def compare_rows(summaries: dict[str, dict[str, Any]]) -> tuple[list[str], list[list[str]]]:
    """(header, one row per run) of the studies side by side, for `finbench compare` and sweeps."""
    modes = sorted({mode for s in summaries.values() for mode in (s.get("image_ablation") or {})})
    probes = sorted({probe for s in summaries.values() for probe in (s.get("probes") or {})})
    header = ["run", "best baseline ×100", "model − best ×100", "circular accuracy ×100", "position bias ×100",
              "option consistency ×100", *[f"{mode}: retained" for mode in modes],
              *[f"{probe}: accuracy ×100 (probe − base)" for probe in probes]]
    rows = []
    for name, s in summaries.items():
        m, c, a = s.get("majority_baseline") or {}, s.get("circular") or {}, s.get("image_ablation") or {}
        p = s.get("probes") or {}
        rows.append([name, pct(m.get("best_accuracy")), _signed(m.get("above_best")), pct(c.get("circular_accuracy")),
                     pct(c.get("position_bias")), pct(c.get("option_consistency")),
                     *[_ratio((a.get(mode) or {}).get("retained")) for mode in modes],
                     *[_probe_cell(p.get(probe) or {}) for probe in probes]])
    return header, rows


def _probe_cell(found: dict[str, Any]) -> str:
    """Accuracy (probe − base), and "by judge" where the --judge model matched the answers: a
    judged probe and a rule-matched one are not the same measurement."""
    judged = " by judge" if found.get("scored_by") == "judge" else ""
    return f"{pct(found.get('accuracy'))} ({_signed(found.get('diff'))}){judged}"
