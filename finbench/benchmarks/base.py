"""The benchmark contract: everything the runner, the judge and the scorer know of a benchmark.

A benchmark file (FinMME is the model to copy, `docs/adding-a-benchmark.md` the walk-through)
defines its official texts and rules as module constants and functions, then ends with ONE
`BENCHMARK = Benchmark(...)` naming them; `finbench/benchmarks/__init__.py` registers it. Fields
left out take the defaults below, which are the behaviour of a benchmark without open answers,
judges or image transforms; nothing is ever probed with `hasattr`.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from finbench.benchmarks.recognise import Recognise, anything
from finbench.benchmarks.records import data_files
from finbench.benchmarks.scorer import Scorer, ScorerModule
from finbench.core.judging import NO_JUDGING, Judgement, Judging
from finbench.core.requests import Prompt, Request, user_message
from finbench.core.types import DEFAULT_PROTOCOL, PROTOCOLS, Prediction, Question


def stripped_text(question: Question, text: str, protocol: str) -> str:
    """Default answer rule for generated text: the text, stripped."""
    return text.strip()


def any_text(text: str) -> bool:
    """Default reply form: any text is read by the answer rule (a rule that reads an answer it
    already read the same way: an identity, a JSON reply kept whole, FCMR's set)."""
    return True


def as_decoded(rule: str, images: Sequence[Any]) -> list[Any]:
    """Default image rule: the decoded images as they are."""
    if rule:
        raise ValueError(f"unknown image rule {rule!r}")
    return list(images)


def record_files(source: Any) -> list[Path]:
    """Default data files of a local source: those the shared loader prologue reads."""
    return data_files(source)


def no_rules(question: Question, prediction: Prediction) -> Judgement:
    return None, {}


# An option that names other options ("Both A and C", "All of the above", 以上都是) means another
# thing once the options move: such an item is asked only in its published order.
_LETTER = r"\(?(?<![A-Za-z])([A-N])(?![A-Za-z])\)?"
_JOIN = r"\s*(?:,|，|、|;|&|\+|/|\band\b|\bor\b|\bnor\b|和|与|及|或|以及)\s*(?:\band\b\s*)?"
_LETTER_PAIR = re.compile(_LETTER + _JOIN + _LETTER)
_LETTER_NAMED = re.compile(r"\b(?:options?|choices?|answers?)\s*" + _LETTER + r"|选项\s*" + _LETTER, re.IGNORECASE)
_GROUP = re.compile(
    r"\b(?:all|none|both|neither|any|either|each)\s+(?:of\s+)?(?:the\s+)?(?:above|these|those|them|preceding|previous"
    r"|other|options|choices|answers|statements)\b|\bneither\b.*\bnor\b|^\W*(?:both|neither|all|none)\W*$"
    r"|\b(?:above|preceding)\s+(?:options|choices|answers|statements)\b",
    re.IGNORECASE)
_GROUP_ZH = re.compile(r"^\W*(?:以上|上述|前述)|(?:以上|上述|前述)(?:都|皆|均|全|各|选项|答案|说法|所有|三|两|二|四)"
                       r"|^\W*(?:都|皆|均|全)(?:是|不是|对|不对|正确|不正确|错误|非)|皆非|均非|都非")  # not "50%以上"


def names_other_options(options: Sequence[str], letters: str) -> bool:
    """Whether an option refers to the others — the whole list ("All of the above", "None of these",
    "Neither", 以上都是, 以上皆非) or other options by letter ("Both A and C", "A and B", "选项A和B"),
    letters of this item only — so that moving the options would change what it says."""
    for text in (str(o) for o in options):
        if _GROUP.search(text) or _GROUP_ZH.search(text):
            return True
        for match in (*_LETTER_PAIR.finditer(text), *_LETTER_NAMED.finditer(text)):
            if all(g is None or g.upper() in letters for g in match.groups()):
                return True
    return False


def rotated_options(question: Question, shift: int) -> Question | None:
    """Default rotation (circular evaluation): the options cyclically rotated by `shift`
    positions — the option at letter j is the published option (j + shift) mod n — and the gold
    letters moved with their options. Right for a benchmark whose prompt renders
    `Question.options` in order; one whose prompt does not cannot be rotated honestly and says so
    with `options_not_rendered`. An item with an option that names other options ("Both A and C",
    "All of the above", 以上都是) has no honest rotation either: None."""
    n = len(question.options)
    if n < 2 or names_other_options(question.options, question.letters):
        return None
    shift %= n
    letters = question.letters
    gold = "".join(sorted(letters[(letters.index(g) - shift) % n] for g in question.gold if g in letters))
    return dataclasses.replace(question, options=question.options[shift:] + question.options[:shift], gold=gold)


def questions_digest(questions: Sequence[Question]) -> str:
    """The content digest of the data a run evaluates (results.json `provenance.data.content`,
    `finbench data check`): every question's id, kind, text, options, gold, tolerance, unit, meta
    and fields, and the SHA-256 of each of its images, in data order — so an image replaced under
    the same path, or a row edited, gives another digest where the files' own digests (which do
    not cover images named by path) would not."""
    digest = hashlib.sha256()
    for question in questions:
        record = [question.id, question.kind, question.text, list(question.options), question.gold,
                  question.tolerance, question.unit, sorted((str(k), str(v)) for k, v in question.meta.items()),
                  sorted((str(k), str(v)) for k, v in question.fields.items()), question.error or "",
                  [hashlib.sha256(bytes(image)).hexdigest() for image in question.images]]
        digest.update(json.dumps(record, ensure_ascii=False, default=str).encode("utf-8", "surrogatepass"))
    return "sha256:" + digest.hexdigest()


@dataclass(frozen=True)
class DataSource(os.PathLike):
    """A `--data` source with the run options a benchmark's loader reads beside it
    (`Benchmark.data_options`: e.g. a column spec file, an image folder), as `load`, `recognise`,
    `files` and `inspect` receive it (`finbench.benchmarks.data_source`). It is the data's path to
    anything that takes one (`Path(source)`, `str(source)`), so a generic layer lists its files as
    it lists any path's."""

    path: str
    options: tuple[tuple[str, Any], ...] = ()

    def __fspath__(self) -> str:
        return self.path

    def __str__(self) -> str:
        return self.path

    def option(self, name: str) -> Any:
        return dict(self.options).get(name)


@dataclass(frozen=True)
class Inspection:
    """What `finbench data check` shows of a benchmark that checks its own data in full
    (`Benchmark.inspect`; a file of the user's own, whose every problem is a start-up refusal):
    the files read, the rows and images found, counts by what splits them (`counts`: title →
    {value: n}), sections of lines (`sections`: the schema it resolved, rendered prompts, …), every
    problem by row (each a refusal of `finbench run`), notes, and the data's content digest."""

    files: tuple[str, ...]
    n_records: int
    n_images: int
    counts: Mapping[str, Mapping[str, int]] = dataclasses.field(default_factory=dict)
    sections: Mapping[str, tuple[str, ...]] = dataclasses.field(default_factory=dict)
    problems: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    digest: str = ""


def cluster_key(field: str, question: Question) -> str:
    """The cluster a question belongs to under a benchmark's `cluster_field`: `id` — its own;
    `image` — a digest of its images' bytes (questions asked of the same picture share it); any
    other name — that meta (or fields) value. A question without that value is its own cluster
    (prefixed so that it cannot collide with a real value)."""
    if field == "image":
        if not question.images:
            return f"id:{question.id}"
        digest = hashlib.sha256()
        for image in question.images:
            digest.update(hashlib.sha256(bytes(image)).digest())
        return "image:" + digest.hexdigest()[:20]
    if field != "id":
        value = question.meta.get(field, question.fields.get(field))
        if value is not None and str(value) != "":
            return str(value)
    return f"id:{question.id}"


# The open-ended probe's instruction (studies/probes.py): the answer itself, which is matched to the
# gold option's text; finbench's own text, in the cache key through the request.
OPEN_INSTRUCTION = "Answer with the answer itself in a few words or a number, not a letter."
OPEN_ANSWER_PREFIX = "Answer:"


def question_alone(question: Question) -> Prompt | None:
    """Default prompt of the open-ended probe: the question's text without its options, its
    images first, for a benchmark whose choice prompt renders `Question.options` apart from the
    text (a benchmark with more prompt material renders its own stem)."""
    images = tuple(range(len(question.images)))
    return Prompt(messages=(user_message(f"{question.text.rstrip()}\n{OPEN_INSTRUCTION}", len(images)),),
                  images=images, answer_prefix=OPEN_ANSWER_PREFIX)


def no_open_prompt(question: Question) -> Prompt | None:
    """A benchmark whose question text carries the options: no stem without them."""
    return None


def options_not_rendered(question: Question, shift: int) -> Question | None:
    """A benchmark whose prompt carries the options inside its own text: no rotation."""
    return None


@dataclass(frozen=True)
class Demo:
    """`finbench demo --benchmark NAME`: `module` names the module (finbench/offline's
    `<name>_synthetic`, or any importable module of a benchmark defined outside finbench) whose
    `demo_data(folder, size)` writes synthetic data in the benchmark's own on-disk format under
    `folder` once per size (None: the default) and returns (the path to give `--data`, whether it
    was written now). `in_home`: the data is kept in FINBENCH_HOME, shared by demo runs (else
    OUT/data). `short_generation`: free text is generated a few tokens long (a random model's text
    is noise); `self_judge`: the demo's tiny model is also its `--judge`, so judged parts of the
    score are computed too, with `judge_max_new_tokens` (None: the benchmark's own)."""

    module: str
    sizes: str  # what --n-items counts, and its default
    in_home: bool = False
    short_generation: bool = True
    self_judge: bool = False
    judge_max_new_tokens: int | None = None

    def write(self, folder: Path, size: int | None) -> tuple[Path, bool]:
        import importlib  # the writer is imported only when a demo runs

        return importlib.import_module(self.module).demo_data(folder, size)


@dataclass(frozen=True)
class Benchmark:
    """One benchmark as the rest of finbench sees it.

    - `hub_id` → where its data is published: a hub data set, or (`hub_set=False`) a GitHub
      repository read only from a local checkout (`finbench benchmarks` says which);
    - `load(source, limit, domains, question_types, notes)` → Questions (a bad record becomes a
      Question with `error`, unusable data one ValueError line);
    - `request(question, protocol)` → the ONE request (finbench/core/requests.py) that question makes;
    - `answer(question, text, protocol)` → the answer judged, from generated text (requests of
      type Generate or Session; choice and number answers come from the constrained decoders);
      `reply_form(text)` → whether a text given to `finbench score --predictions` is a reply in
      the form the benchmark documents (read by `answer`), not an answer `answer` already read
      from one (a run's stored `answer`, taken as it is): FinMME's "Answer: …", FinChart-Bench's
      "[[ … ]]"; by default every text is read (a rule that reads its own readings unchanged);
    - `prepare_images(rule, images)` → the decoded images transformed by a prompt's `image_rule`;
    - `rule_judgement`, `judging` → open answers judged by rules and by a `--judge` model
      (finbench/core/judging.py `Judging`: the requests — `Generate`, with the question's images where
      the official judge sees them — it must answer, and its replies read back); `rule_judgements(questions,
      predictions, protocol, unsafe_sandbox)`, when given, replaces `rule_judgement` with one call
      for the whole run (verdicts that are cheap only together: FinMMR's programs, run in the
      sandbox's jails; `unsafe_sandbox`: without one where none can be built), `program_protocols` names
      the protocols whose answers are programs (refused at start-up where no jail can be built,
      unless --unsafe-sandbox); `constrained_protocols` those of finbench's own prompts, whose
      choices and numbers are read from the logits (their prompt version is `prompt_version`; a
      thinking budget, --permutations and --probe apply to them) — the runner decides nothing
      else from a protocol's name: how an answer is decoded follows from the request's type;
    - `recognise(source)` → "" when a --data source looks like this benchmark's data, else one
      line why not ("…: not FinMMR data — missing …"), asked at start-up before any model loads and
      by `finbench data check`; cheap (column names, benchmarks/recognise.py builds the usual ones);
    - `demo` → how `finbench demo --benchmark NAME` gets synthetic data in the real format;
    - `rotate(question, shift)` → the question with its options rotated and its gold moved, whose
      `request` renders them so (circular evaluation), or None when its prompt does not render
      `Question.options` (FinMTM's objective items carry them inside the question text);
    - `open_prompt(question)` → a choice question's prompt without its options, answered as free
      text (the open-ended probe, studies/probes.py), or None where the text carries the options;
      `language_field` → the meta field holding a question's language ("": English), in which
      the none-of-the-above probe writes its option;
    - `scorer` → the scoring rule (scoring/<name>.py, with the parts it scores apart), named by
      its module (`ScorerModule`: imported when something scores, so that the registry imports no
      torch; benchmarks/scorer.py) or given as a `Scorer`,
      `group_columns` → its breakdowns, `leaderboard_breakdown` → the one the leaderboard shows
      per benchmark (empty: `domain_field`), `leaderboard_metrics` → the metrics of its score (0–1
      keys of `scores`) it shows beside the headline, with each scored part's headline metric;
    - `cluster_field` → what its questions cluster on (`cluster_key`: `id`, `image` or a meta
      field): samples.parquet's `cluster` column, the clustered SEs of `scores.clustered` and the
      cluster bootstrap of its headlines (scoring/clustered.py);
    - `answer_type_field` → the samples column whose values are its answer types (`kind`; FinChart-Bench's
      MC and TF are both single choices over different labels: `task`), for the label balance
      (scoring/balance.py: constant-answer baseline, macro-recall, lowest per-label recall).
      `files(source)` → the data files a source holds, as `finbench data check` lists them;
    - `data_options` → the run options (finbench/config/run_options.py names) its loader reads
      beside `--data` (a column spec, an image folder): `load`, `recognise`, `files` and `inspect`
      then receive a `DataSource`, and a run that gives one it does not read is refused;
      `inspect(source)` → an `Inspection`: what `finbench data check` shows of a benchmark that
      checks its data in full itself (None: the generic check, its loader's per-record errors)."""

    name: str
    title: str
    hub_id: str
    domain_field: str  # the meta field --domain filters on
    prompt_version: str  # finbench's own prompt; bumped when it changes (it is in the cache key)
    official_max_new_tokens: int  # the official generation budget (--max-new-tokens overrides it)
    group_columns: tuple[str, ...]  # the score's breakdowns, in report order
    scorer: Scorer | ScorerModule
    load: Callable[..., list[Question]]
    request: Callable[[Question, str], Request]
    answer: Callable[[Question, str, str], str] = stripped_text
    reply_form: Callable[[str], bool] = any_text
    prepare_images: Callable[[str, Sequence[Any]], list[Any]] = as_decoded
    rule_judgement: Callable[[Question, Prediction], Judgement] = no_rules
    rule_judgements: Callable[[Sequence[Question], Sequence[Prediction], str, bool], list[Judgement]] | None = None
    program_protocols: tuple[str, ...] = ()  # protocols whose answers are programs the sandbox runs
    judging: Judging = NO_JUDGING  # what a --judge model is asked, and its replies read back
    rotate: Callable[[Question, int], Question | None] = rotated_options
    forms: tuple[str, ...] = ("hub parquet/arrow", "local parquet/arrow/jsonl")
    protocols: tuple[str, ...] = PROTOCOLS  # as `finbench benchmarks` describes them
    protocol_names: tuple[str, ...] = PROTOCOLS  # the --protocol values it accepts
    # the protocols of finbench's own prompts, whose choices and numbers are read from the logits
    # (Choose, Number): a --think-budget, --permutations and --probe apply to them
    constrained_protocols: tuple[str, ...] = (DEFAULT_PROTOCOL,)
    metrics: str = ""
    demo: "Demo | None" = None
    leaderboard_breakdown: str = ""
    leaderboard_metrics: tuple[str, ...] = ("accuracy",)  # shown beside the headline where the score has them
    cluster_field: str = "id"  # each question its own cluster unless the benchmark says otherwise
    open_prompt: Callable[[Question], Prompt | None] = question_alone
    language_field: str = ""  # the meta field of a question's language ("": every question in English)
    recognise: Recognise = anything  # "" when a --data source looks like this benchmark's data, else why not
    # what splits the choice items into answer types, each with its own labels (scoring/balance.py):
    # the constant answer, macro-recall and the lowest per-label recall are computed per type
    answer_type_field: str = "kind"
    files: Callable[[Any], list[Path]] = record_files
    data_options: tuple[str, ...] = ()  # run options its loader reads beside --data (a DataSource)
    inspect: Callable[[Any], Inspection] | None = None  # `finbench data check`'s full check of its own
    hub_set: bool = True  # False: `hub_id` names a GitHub repository, read only from a local checkout (--data)

    @property
    def breakdown_column(self) -> str:
        """The breakdown the leaderboard shows for this benchmark's runs."""
        return self.leaderboard_breakdown or self.domain_field

    def prompt_version_for(self, protocol: str) -> str:
        """The prompt version in the cache key: ours under a constrained protocol, the official one else."""
        return self.prompt_version if protocol in self.constrained_protocols else f"{self.name}-official"
