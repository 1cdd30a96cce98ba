"""The compute a test-time method spends on a problem, in characters a model computes, each once: a trie per problem
and per net (the problem once, sibling lines sharing their prefix); the solve rate at any budget from one run."""

from __future__ import annotations

from collections import Counter


def trie_characters(texts: list[str]) -> int:
    """The characters of `texts` computed once each where they share a prefix: the size of their trie."""
    ordered = sorted(texts)
    shared = [0] + [next((i for i, (a, b) in enumerate(zip(x, y)) if a != b), min(len(x), len(y)))
                    for x, y in zip(ordered, ordered[1:])]
    return sum(len(text) - common for text, common in zip(ordered, shared))


def problem_key(text: str) -> str:
    """The problem a text belongs to: its first line (every text of a problem starts with it)."""
    return text[:text.index("\n") + 1]


class Compute:
    """Characters computed per problem (summed over the nets that read them), the compute spent when each problem's
    first answer was found, and beside them the characters the policy generated (sampled; a listed line is scored,
    not generated)."""

    def __init__(self):
        self._tries: dict[tuple[str, str], dict] = {}
        self.spent: Counter[str] = Counter()  # problem -> characters computed so far
        self.first_answer: dict[str, int] = {}  # problem -> characters computed when its first answer was found
        self.generated: Counter[str] = Counter()  # problem -> characters the policy sampled, each sample's own

    def charge(self, text: str, net: str = "policy") -> int:
        """The characters of `text` that `net` has not yet computed for its problem, now counted; returns them."""
        key = problem_key(text)
        node = self._tries.setdefault((key, net), {})
        new = 0
        for character in text:
            if character not in node:
                node[character] = {}
                new += 1
            node = node[character]
        self.spent[key] += new
        return new

    def generate(self, text: str, characters: int) -> None:
        """The policy sampled `characters` after this text, for its problem."""
        self.generated[problem_key(text)] += characters

    def answered(self, text: str) -> None:
        """An answer of this text's problem was found (by the exact check of the end), at the compute spent so far."""
        key = problem_key(text)
        self.first_answer.setdefault(key, self.spent[key])

    def solved_within(self, problem_text: str, budget: float) -> bool:
        """Whether the problem's first answer came at `budget` characters or fewer."""
        return self.first_answer.get(problem_text, float("inf")) <= budget
