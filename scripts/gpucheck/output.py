"""The check's headline, the A/B rule and its Markdown table."""

from __future__ import annotations

from typing import Any

FINMME_ITEMS = 11_099


def headline(payload: dict[str, Any]) -> str:
    run = payload["results"].get("run", {})
    profile, baseline = payload["results"].get("profile", {}), payload["results"].get("baseline", {})
    if "samples_per_s" not in run:
        return f"{payload['model']}: no run ({run.get('error') or run.get('skipped') or 'not reached'})"
    mfu = f"{100 * profile['prefill_mfu']:.1f}%" if profile.get("prefill_mfu") else "–"
    ratio = f"{baseline['speedup']:.1f}x" if baseline.get("speedup") else "–"
    projected = run.get("projected_finmme_minutes")
    return (f"{payload['model']} through finbench run's defaults {run.get('settings', '')}: "
            f"{run['samples_per_s']:.2f} samples/s, projected FinMME ({FINMME_ITEMS:,} items) "
            f"{projected:.1f} min (load {run['load_s']:.1f} s + fill {run['fill_s']:.1f} s + steady "
            f"{run['steady_samples_per_s']:.2f}/s), prefill MFU {mfu} (profiled batch), vs generate+regex {ratio}"
            if projected else f"{payload['model']}: {run['samples_per_s']:.2f} samples/s")


def verdict(name: str, row: dict[str, Any]) -> str:
    """The rule that turns an interleaved A/B row into a default, only outside the noise: the row's
    projected minutes (compile time included) against the default runs between them; when the two
    spreads (min..max over the pairs) overlap, "within noise" and nothing changes. A lever whose
    removal is slower pays (keep it on); one whose removal is faster should be off; a compiler or
    a quantization that is faster pays. Rates only: the answers are compared beside it. A row with
    failed samples gets no verdict: its rate timed error paths."""
    mine, base = row.get("projected_finmme_minutes"), row.get("default_minutes")
    if name in ("reference", "default") or not mine or not base:
        return ""
    if row.get("sample_errors"):
        return f"no verdict: {row['sample_errors']} samples failed ({row.get('first_error') or 'see the runs'})"
    low, high = row.get("minutes_spread") or [mine, mine]
    base_low, base_high = row.get("default_minutes_spread") or [base, base]
    figures = f"{mine:.2f} vs {base:.2f} min"
    if base_low <= high and low <= base_high:
        return f"within noise ({figures}; spreads {low:.2f}-{high:.2f} and {base_low:.2f}-{base_high:.2f} overlap)"
    faster = high < base_low
    if name.startswith("no-"):
        lever = name.removeprefix("no-")
        return (f"{lever} does not pay here ({figures}): its CUDA default should be off" if faster else
                f"{lever} pays ({figures}): keep it on")
    if name.startswith("compile-"):
        return (f"pays ({figures}, compile included): make --{name} the CUDA default" if faster else
                f"does not pay ({figures}): leave --{name} opt-in")
    return f"pays ({figures})" if faster else f"does not pay ({figures})"


def _ab_line(name: str, row: dict[str, Any]) -> str:
    if "samples_per_s" not in row:
        return f"| {name} | – | – | – | – | – | {row.get('error') or row.get('skipped') or ''} | |"
    equal = f"{row['answers_equal']}/{row['compared']}" if "compared" in row else "(reference)"
    gap = f"{row['max_option_prob_diff']:.2e}" if "max_option_prob_diff" in row else "–"
    minutes = f"{row['projected_finmme_minutes']:.2f}" if row.get("projected_finmme_minutes") else "–"
    base = f"{row['default_minutes']:.2f}" if row.get("default_minutes") else "–"
    notes = [f"compile {row['compile_s']:.0f} s" if row.get("compile_s") else "",
             f"cut after {row['pairs']} of {row['pairs_planned']} pairs" if "error" in row and "pairs" in row else ""]
    return (f"| {name} | {row['samples_per_s']:.2f} | {minutes} | {base} | {equal} | {gap} | "
            f"{'; '.join(n for n in notes if n)} | {verdict(name, row)} |")


def markdown(payload: dict[str, Any], stem: str) -> str:
    lines = [f"# {stem}", "", str(payload["environment"]), "", f"- {headline(payload)}", "",
             "| section | limit (s) | elapsed (s) | status |", "|---|---|---|---|"]
    for record in payload["sections"]:
        limit = f"{record['limit_s']:.0f}" if record["limit_s"] else "–"
        lines.append(f"| {record['name']} | {limit} | {record['elapsed_s']:.1f} | {record['status']} |")
    lines.append("")
    for name, section in {**payload["results"], **payload["ab"]}.items():
        if "error" in section or "skipped" in section:
            lines.append(f"- {name}: {section.get('error') or section.get('skipped')}")
    think = payload["results"].get("think", {})
    if "tokens_per_s" in think:
        lines.append(f"- think: {think['tokens_per_s']:.0f} decode tokens/s at batch {think['batch']}, "
                     f"{think['ms_per_step']:.2f} ms per step, {100 * think['roofline_fraction']:.0f}% of the HBM roofline")
    lines += ["", "| A/B | samples/s | projected FinMME (min) | default (min) | answers equal to reference | "
              "max Δ option prob | note | verdict |", "|---|---|---|---|---|---|---|---|"]
    lines += [_ab_line(name, row) for name, row in payload["ab"].items()]
    return "\n".join(lines) + "\n"
