"""Seeded easy arithmetic word problems (one- and two-step add/sub/mul) in the kit's row schema.
The embedded task: small enough that a 135M model on 2 CPU cores can visibly learn it."""

from __future__ import annotations

import random

from azlib.data.rows import Row

NAMES = [("Ava", "She"), ("Ben", "He"), ("Chloe", "She"), ("Dev", "He"), ("Emma", "She"), ("Finn", "He"),
         ("Grace", "She"), ("Hugo", "He"), ("Iris", "She"), ("Jack", "He"), ("Lena", "She"), ("Omar", "He")]
ITEMS = ["apples", "marbles", "stickers", "pencils", "cookies", "books", "shells", "cards", "coins", "eggs"]


def _one_step(rng: random.Random, name: str, he: str, item: str) -> tuple[str, str, int, str]:
    op = rng.choice(["add", "sub", "mul"])
    if op == "add":
        a, b = rng.randint(2, 50), rng.randint(2, 50)
        q = f"{name} has {a} {item}. {he} gets {b} more. How many {item} does {name} have now?"
        return op, q, a + b, f"{a} + {b} = {a + b}"
    if op == "sub":
        a = rng.randint(10, 60)
        b = rng.randint(1, a - 1)
        q = f"{name} has {a} {item}. {he} gives {b} of them to a friend. How many {item} does {name} have left?"
        return op, q, a - b, f"{a} - {b} = {a - b}"
    a, b = rng.randint(2, 12), rng.randint(2, 12)
    q = f"{name} buys {a} bags of {item}. Each bag holds {b} {item}. How many {item} does {name} buy?"
    return op, q, a * b, f"{a} * {b} = {a * b}"


def _two_step(rng: random.Random, name: str, he: str, item: str) -> tuple[str, str, int, str]:
    op = rng.choice(["add-sub", "mul-add", "mul-sub"])
    if op == "add-sub":
        a, b = rng.randint(5, 40), rng.randint(2, 30)
        c = rng.randint(1, a + b - 1)
        q = (f"{name} has {a} {item}. {he} gets {b} more and then gives away {c}. "
             f"How many {item} does {name} have now?")
        return op, q, a + b - c, f"{a} + {b} = {a + b}\n{a + b} - {c} = {a + b - c}"
    a, b = rng.randint(2, 9), rng.randint(2, 9)
    if op == "mul-add":
        c = rng.randint(1, 20)
        q = (f"{name} buys {a} boxes with {b} {item} in each box, and finds {c} more {item}. "
             f"How many {item} does {name} have?")
        return op, q, a * b + c, f"{a} * {b} = {a * b}\n{a * b} + {c} = {a * b + c}"
    c = rng.randint(1, a * b - 1)
    q = (f"{name} buys {a} boxes with {b} {item} in each box, and eats {c} of the {item}. "
         f"How many {item} are left?")
    return op, q, a * b - c, f"{a} * {b} = {a * b}\n{a * b} - {c} = {a * b - c}"


def arithmetic_problems(n: int, seed: int = 0, steps: tuple[int, ...] = (1, 2)) -> list[Row]:
    """`n` problems, each with a step count drawn from `steps`; the same seed gives the same rows."""
    if n < 0 or not steps or not set(steps) <= {1, 2}:
        raise ValueError(f"need n >= 0 and steps within (1, 2); got n={n}, steps={steps}")
    rng = random.Random(seed)
    rows: list[Row] = []
    for i in range(n):
        name, he = rng.choice(NAMES)
        item = rng.choice(ITEMS)
        num_steps = rng.choice(steps)
        op, question, value, work = (_one_step if num_steps == 1 else _two_step)(rng, name, he, item)
        rows.append({
            "prompt": question,
            "answer": str(value),
            "info": {"id": f"arith-{seed}-{i}", "solution": f"{work}\n#### {value}", "steps": num_steps,
                     "operation": op, "source": "arithmetic"},
        })
    return rows
