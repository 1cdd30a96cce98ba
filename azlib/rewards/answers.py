"""Final numeric answers: extract one from model text, normalise it, compare it with the gold.
Pure string work in linear time; never evaluates model text (no eval, no exec)."""

from __future__ import annotations

import re

from azlib.prompts import ANSWER_LINE

# A number as models write it: optional sign, digits with thousands commas, optional decimals.
# No nested quantifiers, so matching is linear in the text length (no catastrophic backtracking).
_NUMBER = r"-?(?:\d[\d,]*(?:\.\d+)?|\.\d+)"
_DECORATION = r"[\s*$:=]*"  # markdown emphasis, currency, "is:" between the marker and the number
_MARKER = re.compile(r"####" + _DECORATION + f"({_NUMBER})")
_PHRASE = re.compile(r"(?:final answer|answer is|answer:)" + _DECORATION + f"({_NUMBER})", re.IGNORECASE)
_BOXED = re.compile(r"\\boxed\{" + _DECORATION + f"({_NUMBER})")
_ANY = re.compile(f"({_NUMBER})")
_PLAIN = re.compile(r"(-?)(\d*)(?:\.(\d*))?")


def normalize_number(text: str) -> str | None:
    """'1,234.50' -> '1234.5', '$18.00' -> '18', '7.' -> '7', '50%' -> '50'; None if not a number."""
    cleaned = text.strip().strip("*").replace(",", "").replace("$", "").rstrip("%").rstrip(".")
    # String arithmetic, not float or Decimal: exact, and linear even for absurdly long digit runs.
    match = _PLAIN.fullmatch(cleaned)
    if match is None:
        return None
    sign, whole, fraction = match.group(1), match.group(2), match.group(3) or ""
    if not whole and not fraction:
        return None
    number = (whole.lstrip("0") or "0") + ("." + fraction.rstrip("0") if fraction.rstrip("0") else "")
    return number if number == "0" else sign + number


def _last(pattern: re.Pattern, text: str) -> str | None:
    match = None
    for match in pattern.finditer(text):
        pass
    return match.group(1) if match else None


def extract_answer(text: str) -> str | None:
    """The final answer of a response, normalised: the last '#### N'; else the last 'answer is N',
    'final answer: N' or '\\boxed{N}'; else the last number in the text; None if there is none."""
    for pattern in (_MARKER, _PHRASE, _BOXED, _ANY):
        found = _last(pattern, text)
        if found is not None and (number := normalize_number(found)) is not None:
            return number
    return None


def is_correct(predicted: str | None, gold: str | None) -> bool:
    """Equal as numbers ('18.00' == '18'); a missing prediction is wrong."""
    if predicted is None or gold is None:
        return False
    a, b = normalize_number(predicted), normalize_number(gold)
    return a is not None and a == b


def complete_answer(text: str, ended: bool) -> tuple[str, bool]:
    """A generated answer as training and rewards read it, and whether it is finished. An answer ends
    at its first answer line ('#### N' and a newline: what follows is dropped; an end-of-sequence token
    belongs there) or where the writer ended it (`ended`: EOS); otherwise it was cut and is unfinished."""
    line = ANSWER_LINE.search(text)
    if line:
        return text[: line.end()], True
    return text, ended
