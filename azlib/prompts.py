"""Text conventions every layer shares: the kit's chat prompt, a partial answer to continue, the hint teacher's prompt,
the answer line a finished answer ends with. What a reward or a search makes of them lives with it."""

from __future__ import annotations

import re

# '#### N': the answer mark; followed by a newline it is an answer line, the writer has committed to it.
ANSWER_MARK = re.compile(r"####\s*-?[\d,]*\.?\d+")
ANSWER_LINE = re.compile(ANSWER_MARK.pattern + r"\s*\n")
CHAT_INSTRUCTION = "Solve the problem step by step. End with a final line of the form '#### <number>'."
HINT_INTRO = "A worked solution, for you to explain in your own words:"
# A GSM8K question (or notebook 06's question + solution) in the chat template, in tokens, upper end: what GPU
# plans and batch sizes assume of a prompt
PROMPT_TOKENS = 256


def chat_prompt(question: str) -> list[dict[str, str]]:
    """The kit's zero-shot chat prompt (also what training asks the student)."""
    return [{"role": "user", "content": f"{question}\n\n{CHAT_INSTRUCTION}"}]


def hint_prompt(question: str, solution: str) -> list[dict[str, str]]:
    """The chat prompt with the reference solution as a hint (STaR's rationalization, Zelikman et al. 2022,
    sec. 3.2): what the hint teacher reads. GSM8K's calculator annotations `<<48/2=24>>` are left out."""
    hint = re.sub(r"<<[^>]*>>", "", solution).strip()
    return [{"role": "user", "content": f"{question}\n\n{HINT_INTRO}\n{hint}\n\n{CHAT_INSTRUCTION}"}]


def continuation_prompt(question: str, partial: str, system: str | None = None) -> list[dict[str, str]]:
    """The chat prompt with a partial answer as an assistant message to be continued: what a teacher reads (a teacher
    writes text; the student continues a partial answer from its ids, azlib.games.text.env.TextEnv.context)."""
    out = ([{"role": "system", "content": system}] if system else []) + chat_prompt(question)
    return out + [{"role": "assistant", "content": partial}] if partial else out

