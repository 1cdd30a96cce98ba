"""The terminal checker: is a partial answer complete? A rule decides when it can ('#### N' written:
yes; no number at all: no); otherwise a small model is asked at temperature 0 for a short yes/no."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Sequence

from azlib.models import Backend
from azlib.prompts import ANSWER_MARK

_DIGIT = re.compile(r"\d")
CHECK_SYSTEM = "You check whether a response to a math question is finished. Reply with one word: yes or no."


def rule_verdict(text: str) -> bool | None:
    """True once the answer line is written, False with no number yet, None when undecided."""
    if ANSWER_MARK.search(text):
        return True
    if not _DIGIT.search(text):
        return False
    return None


def check_messages(question: str, text: str) -> list[dict[str, str]]:
    return [{"role": "system", "content": CHECK_SYSTEM},
            {"role": "user", "content": f"Question: {question}\n\nResponse: {text}\n\n"
                                        "Has the response stated its final numeric answer? yes or no"}]


@dataclass
class TerminalChecker:
    """check() uses the rule first and one batched model call for the rest (the original system's: temperature 0,
    max_tokens 50; a yes/no needs far fewer)."""

    backend: Backend
    max_new_tokens: int = 4
    by_rule: int = 0
    by_model: int = 0

    def ask(self, questions: Sequence[str], texts: Sequence[str]) -> list[bool]:
        """The model's verdicts only (greedy; an answer starting with 'yes' means complete)."""
        if not texts:
            return []
        out = self.backend.generate([check_messages(q, t) for q, t in zip(questions, texts)],
                                    max_new_tokens=self.max_new_tokens, temperature=0.0)
        return [group[0].text.strip().lower().startswith("yes") for group in out]

    def check(self, questions: Sequence[str], texts: Sequence[str]) -> list[bool]:
        verdicts = [rule_verdict(t) for t in texts]
        undecided = [i for i, v in enumerate(verdicts) if v is None]
        answers = self.ask([questions[i] for i in undecided], [texts[i] for i in undecided])
        for i, answer in zip(undecided, answers):
            verdicts[i] = answer
        self.by_rule += len(texts) - len(undecided)
        self.by_model += len(undecided)
        return [bool(v) for v in verdicts]

    def agreement(self, questions: Sequence[str], texts: Sequence[str]) -> dict[str, float]:
        """On the texts the rule decides, how often the model says the same (and on how many)."""
        decided = [(q, t, v) for q, t in zip(questions, texts) if (v := rule_verdict(t)) is not None]
        if not decided:
            return {"agreement": float("nan"), "decided": 0, "model_yes_rate": float("nan")}
        model = self.ask([q for q, _, _ in decided], [t for _, t, _ in decided])
        same = sum(m == v for m, (_, _, v) in zip(model, decided))
        return {"agreement": same / len(decided), "decided": len(decided), "model_yes_rate": sum(model) / len(model)}
