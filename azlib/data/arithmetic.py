"""Seeded arithmetic word problems, chains of 1 to 4 add/sub/mul steps, in training or held-out transfer wordings.
The embedded task a 135M model visibly learns on a CPU; not GSM8K (gsm8k.py), and it scores nothing (azlib.rewards)."""

from __future__ import annotations

import random
from typing import Literal, get_args

from azlib.data.rows import Row

Wording = Literal["train", "transfer", "all"]
WORDINGS = get_args(Wording)
STEP_COUNTS = (1, 2, 3, 4)

NAMES = [("Ava", "she", "her"), ("Ben", "he", "his"), ("Chloe", "she", "her"), ("Dev", "he", "his"),
         ("Emma", "she", "her"), ("Finn", "he", "his"), ("Grace", "she", "her"), ("Hugo", "he", "his"),
         ("Iris", "she", "her"), ("Jack", "he", "his"), ("Lena", "she", "her"), ("Omar", "he", "his")]
ITEMS = ["apples", "marbles", "stickers", "pencils", "cookies", "books", "shells", "cards", "coins", "eggs"]

# One sentence per slot, by template id; fields: {name} {He} {His} {his} {item} {a} {b}.
# "start" opens with a quantity a; "mul-open" opens with a containers of b (the chain's first step is a * b);
# "add", "sub" and "mul" apply b to the current quantity; "question" asks for the final one.
# The transfer wordings share no template id and no sentence with the training ones, so a model that only
# learned the training phrasings shows it on them; the numbers come from the same ranges in both.
TEMPLATES: dict[str, dict[str, dict[str, str]]] = {
    "train": {
        "start": {"start.has": "{name} has {a} {item}.",
                  "start.owns": "{name} owns {a} {item}.",
                  "start.starts": "{name} starts with {a} {item}."},
        "mul-open": {"mul.bags": "{name} buys {a} bags of {item} with {b} {item} in each bag.",
                     "mul.boxes": "{name} has {a} boxes, and each box holds {b} {item}.",
                     "mul.jars": "{name} fills {a} jars with {b} {item} each."},
        "add": {"add.gets": "{He} gets {b} more {item}.",
                "add.finds": "{He} finds {b} more {item}.",
                "add.given": "{He} is given {b} more {item}."},
        "sub": {"sub.gives": "{He} gives {b} of the {item} to a friend.",
                "sub.loses": "{He} loses {b} {item}.",
                "sub.sells": "{He} sells {b} {item}."},
        "mul": {"mul.times-as-many": "{He} then has {b} times as many {item} as before.",
                "mul.trades": "{He} trades each of {his} {item} for {b} new {item}.",
                "mul.grows": "{His} pile of {item} grows to {b} times its size."},
        "question": {"question.have-now": "How many {item} does {name} have now?",
                     "question.end-up": "How many {item} does {name} end up with?",
                     "question.at-the-end": "How many {item} does {name} have at the end?"},
    },
    "transfer": {
        "start": {"start.keeps": "{name} keeps {a} {item} in a drawer.",
                  "start.collection": "{name}'s collection holds {a} {item}."},
        "mul-open": {"mul.crates": "Each of the {a} crates that {name} owns contains {b} {item}.",
                     "mul.parcels": "{name} receives {a} parcels, each containing {b} {item}."},
        "add": {"add.neighbour": "A neighbour hands {name} another {b} {item}.",
                "add.wins": "{He} wins {b} additional {item}."},
        "sub": {"sub.missing": "Later, {b} of {his} {item} go missing.",
                "sub.donates": "{name} donates {b} {item} to the school."},
        "mul": {"mul.multiplied": "The number of {item} {name} holds is multiplied by {b}.",
                "mul.replaced": "Each of {his} {item} is replaced by {b} {item}."},
        "question": {"question.total": "What is the total number of {item} {name} has now?",
                     "question.count": "Count the {item} that {name} has in the end.",
                     "question.find": "Find how many {item} {name} is left with."},
    },
}

# Every result stays a positive integer below this, so the numbers stay ones a small model has seen.
LIMIT = 1000
SYMBOL = {"add": "+", "sub": "-", "mul": "*"}


def _slot_templates(wording: Wording) -> dict[str, dict[str, str]]:
    if wording != "all":
        return TEMPLATES[wording]
    return {slot: {**TEMPLATES["train"][slot], **TEMPLATES["transfer"][slot]} for slot in TEMPLATES["train"]}


def _operands(op: str, x: int) -> range:
    """Right operands b for `x op b` keeping the result within 1..LIMIT-1 (maybe none): add up to 50, sub up to
    60, mul 2..12. b >= 2 everywhere, so "b apples" is always plural."""
    high = {"add": min(50, LIMIT - 1 - x), "sub": min(60, x - 1), "mul": min(12, (LIMIT - 1) // x)}[op]
    return range(2, high + 1)


def _apply(op: str, a: int, b: int) -> int:
    return {"add": a + b, "sub": a - b, "mul": a * b}[op]


def _problem(rng: random.Random, words: random.Random, num_steps: int, slots: dict[str, dict[str, str]],
             fields: dict[str, str]) -> tuple[str, list[str], list[str], list[str], int]:
    """(prompt, template ids, solution lines `a op b = c`, operations, value) of one chain of num_steps:
    `rng` draws the arithmetic, `words` the templates."""
    template_ids, sentences, lines, ops = [], [], [], []

    def say(slot: str, **numbers: int) -> None:
        template_id = words.choice(list(slots[slot]))
        template_ids.append(template_id)
        sentences.append(slots[slot][template_id].format(**fields, **numbers))

    value = 0
    for step in range(num_steps):
        op = rng.choice([o for o in SYMBOL if step == 0 or _operands(o, value)])
        if step == 0 and op == "mul":  # a first multiplication is the opening itself: a containers of b items
            a, b = rng.randint(2, 12), rng.randint(2, 12)
            say("mul-open", a=a, b=b)
        else:
            if step == 0:
                value = rng.randint(5, 60)
                say("start", a=value)
            a, b = value, rng.choice(_operands(op, value))
            say(op, b=b)
        value = _apply(op, a, b)
        lines.append(f"{a} {SYMBOL[op]} {b} = {value}")
        ops.append(op)
    say("question")
    return " ".join(sentences), template_ids, lines, ops, value


def arithmetic_problems(n: int, seed: int = 0, steps: tuple[int, ...] = (1, 2),
                        wording: Wording = "train") -> list[Row]:
    """`n` problems, each a chain with a step count drawn from `steps`, phrased in the `wording` templates
    ("transfer": held out from training; "all": either). The same arguments give the same rows, and the
    wordings of one seed pose the same chains (names, items, numbers): only the sentences differ."""
    if n < 0:
        raise ValueError(f"n must be >= 0, got n={n}")
    if not steps or not set(steps) <= set(STEP_COUNTS):
        raise ValueError(f"steps must be a non-empty subset of {STEP_COUNTS}, got steps={steps}")
    if wording not in WORDINGS:
        raise ValueError(f"wording must be one of {WORDINGS}, got wording={wording!r}")
    slots = _slot_templates(wording)
    rng, words = random.Random(seed), random.Random(f"{seed}-words")
    # The other wordings' ids name the wording, so a mixed evaluation never collides with the training ids.
    id_prefix = "arith" if wording == "train" else f"arith-{wording}"
    rows: list[Row] = []
    for i in range(n):
        name, he, his = rng.choice(NAMES)
        fields = {"name": name, "He": he.capitalize(), "His": his.capitalize(), "his": his, "item": rng.choice(ITEMS)}
        prompt, template_ids, lines, ops, value = _problem(rng, words, rng.choice(steps), slots, fields)
        rows.append({
            "prompt": prompt,
            "answer": str(value),
            "info": {"id": f"{id_prefix}-{seed}-{i}", "solution": "\n".join(lines) + f"\n#### {value}",
                     "steps": len(lines), "operation": "-".join(ops), "source": "arithmetic",
                     "wording": wording, "templates": template_ids},
        })
    return rows
