"""The tiny checkpoints' tokenizer: a ~400-token byte-level BPE trained in milliseconds on a small
fixed corpus, with the guarantees constrained decoding needs (`check_tokenizer`), shared by every
tiny family (offline/tiny.py, offline/tiny_deepseek_vl2.py)."""

from __future__ import annotations

import json
from typing import Any

from finbench.core.types import OPTION_LETTERS

TINY_MARKER = "finbench_tiny.json"
TINY_NOTE = "random weights: outputs are chance level"
# Target vocabulary size of the trained BPE (special tokens included).
_BPE_VOCAB_SIZE = 400

# Qwen's pre-tokenizer regex, except that a letter run may only be preceded by an optional space
# (Qwen allows any one non-letter, e.g. ":A"). Training with it means no merge ever joins
# punctuation and letters, so "Answer:" + "A" stays ":" "A" under Qwen's regex at load time.
_TRAIN_SPLIT_REGEX = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)| ?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)

# Strings that must each be exactly one token.
SINGLE_TOKEN_STRINGS: tuple[str, ...] = (
    tuple(OPTION_LETTERS)
    + tuple(" " + c for c in OPTION_LETTERS)
    + tuple("0123456789")
    + (".", "-", "%", ",", " ")
)


def _training_corpus() -> list[str]:
    """A small, fixed corpus: financial prose, numbers, option lists, answer formats, chat words.
    It only has to produce a plausible ~400-token vocabulary; its exact content is not a contract."""
    sentences = [
        "You are a helpful assistant.",
        "system user assistant",
        "Question: Based on the chart, what was the revenue growth rate in 2023?",
        "Options: A. 12.5% B. 8.3% C. -4.1% D. 15.0%",
        "Please answer with the letter of the correct option. Answer: B",
        "The company reported total revenue of $3,450 million, up 12.5% year over year.",
        "Net income fell to 1,204.7 thousand dollars while operating margin was 18.2%.",
        "The balance sheet shows total assets, total liabilities and shareholders' equity.",
        "Earnings per share (EPS) increased from 2.45 to 3.10 in the fourth quarter.",
        "The bank's capital ratio, interest rate spread and loan loss provisions are shown in the table.",
        "Cash flow from operating activities exceeded capital expenditure by 640 million.",
        "The stock price closed at 102.35, a return of -2.7% over the previous month.",
        "Inflation, GDP growth, bond yields and the exchange rate moved in opposite directions.",
        "Which of the following statements about the financial statement is correct?",
        "Calculate the price to earnings ratio and round the answer to two decimal places.",
        "The dividend yield is 3.2% and the payout ratio is 45%.",
        "Market capitalization, revenue, profit, cost, debt, equity, asset, liability, ratio, value.",
        "The image shows a bar chart of quarterly sales and a line chart of gross profit.",
        "Select all options that apply. Answer: A, C",
        "The answer is (C). The correct answers are A and D.",
        "Numerical answer: 0.25 or 25% or -1,000.5",
        "Picture 1: Picture 2: Video 1:",
    ]
    options = [f"{c}. option {c}" for c in OPTION_LETTERS]
    options += [f"({c}) choice" for c in OPTION_LETTERS]
    options += [f"{c}) answer" for c in OPTION_LETTERS]
    options += [f"Answer: {c}" for c in OPTION_LETTERS]
    options += [f"Answer:{c}" for c in OPTION_LETTERS]
    options += [f"The answer is {c}." for c in OPTION_LETTERS]
    numbers = [f"{i}.{j}% {i * 13 - 40},{j}00 -{i}.{j}" for i in range(10) for j in range(0, 10, 3)]
    return sentences * 4 + options * 2 + numbers


def _train_bpe(special_tokens: tuple[str, ...]) -> tuple[dict[str, int], list[tuple[str, str]]]:
    """Train a byte-level BPE (vocab + merges) in milliseconds; special tokens get ids 0..k-1."""
    from tokenizers import Regex, Tokenizer, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(_TRAIN_SPLIT_REGEX), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    trainer = trainers.BpeTrainer(
        vocab_size=_BPE_VOCAB_SIZE,
        min_frequency=2,
        special_tokens=list(special_tokens),
        # All 256 byte symbols, so any text (any language, any digit) is encodable.
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(_training_corpus(), trainer)
    model = json.loads(tokenizer.to_str())["model"]
    vocab: dict[str, int] = dict(model["vocab"])
    merges = [tuple(m.split(" ")) if isinstance(m, str) else tuple(m) for m in model["merges"]]
    # " A".." N" must be single tokens whatever the corpus taught: append the missing merges
    # ("Ġ" is the byte-level symbol for a space). Appended merges rank last, which is harmless.
    for letter in OPTION_LETTERS:
        token = "Ġ" + letter
        if token not in vocab:
            vocab[token] = len(vocab)
            merges.append(("Ġ", letter))
    return vocab, merges  # type: ignore[return-value]


def _build_tokenizer(
    special: tuple[str, ...],
    plain_added: tuple[str, ...],
    named: dict[str, str] | None,
    chat_template: str,
    tokenizer_class: str = "Qwen2Tokenizer",
) -> Any:
    """The real tokenizer class around the trained BPE. eos = <|im_end|> (the Instruct models'
    turn end), pad = <|endoftext|>, no bos, as in the released tokenizer_config.json files."""
    import transformers
    from tokenizers import AddedToken

    vocab, merges = _train_bpe(special + plain_added)
    kwargs: dict[str, Any] = {}
    if named:
        kwargs["extra_special_tokens"] = dict(named)
    tokenizer = getattr(transformers, tokenizer_class)(
        vocab=vocab,
        merges=merges,
        unk_token=None,
        bos_token=None,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        padding_side="left",  # must be a constructor argument to be saved (see module doc)
        model_max_length=32768,
        clean_up_tokenization_spaces=False,
        chat_template=chat_template,
        **kwargs,
    )
    extra = [t for t in special if t not in ("<|endoftext|>", "<|im_end|>")]
    tokenizer.add_special_tokens({"extra_special_tokens": extra}, replace_extra_special_tokens=False)
    tokenizer.add_tokens([AddedToken(t, special=False, normalized=False) for t in plain_added])
    return tokenizer


def check_tokenizer(
    tokenizer: Any,
    boundary_prompts: tuple[str, ...] = (),
    single_tokens: tuple[str, ...] = SINGLE_TOKEN_STRINGS,
) -> None:
    """Raise ValueError unless the option-letter/number tokenization properties hold.

    Usable on any checkpoint's tokenizer (an adapter may call it at load time): single-token
    option letters (bare and space-prefixed), digits and number punctuation, and no merge across
    the boundary between a prompt ending in "Answer:" / "assistant\\n" and the answer letter.
    Raises rather than asserts so that `python -O` cannot silence it."""
    for text in single_tokens:
        ids = tokenizer.encode(text, add_special_tokens=False)
        if len(ids) != 1 or tokenizer.decode(ids) != text:
            raise ValueError(f"{text!r} is not a single token: {ids} -> {tokenizer.decode(ids)!r}")
    prompts = boundary_prompts or (
        "Question: what was the growth rate? Answer:",
        "<|im_start|>user\nWhich option?<|im_end|>\n<|im_start|>assistant\n",
        "assistant\n",
        "Answer:",
    )
    for prompt in prompts:
        base = tokenizer.encode(prompt, add_special_tokens=False)
        for letter in OPTION_LETTERS:
            for spelling in (letter, " " + letter):
                ids = tokenizer.encode(prompt + spelling, add_special_tokens=False)
                single = tokenizer.encode(spelling, add_special_tokens=False)
                if ids != base + single:
                    raise ValueError(
                        f"{prompt!r} + {spelling!r} merges across the boundary: {ids} != {base} + {single}"
                    )
