"""Graders for the notebooks' exercises (`check_<name>(fn)`: fn against azlib's own on fresh random inputs; `seed`
is for tests) and concept checks (`concept_check`). Not the answers: those are in notebooks/solutions.py."""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from typing import Any, Callable, Sequence

CASES = 12  # random cases per check


@dataclass(frozen=True)
class Grade:
    """What a check found: status "passed", "failed" or "not done", and the message it printed."""

    exercise: str
    status: str
    message: str

    @property
    def passed(self) -> bool:
        return self.status == "passed"

    def _ipython_display_(self) -> None:  # the check has printed its message already
        pass


def _close(mine: Any, theirs: Sequence[float], rtol: float = 1e-5, atol: float = 1e-6) -> bool:
    """Float sequences equal within tolerance (float32 arithmetic passes); NaN or a length mismatch fails."""
    try:
        mine = [float(x) for x in _flat(mine)]
    except (TypeError, ValueError):
        return False
    theirs = [float(x) for x in _flat(theirs)]
    return len(mine) == len(theirs) and all(
        math.isfinite(a) and math.isclose(a, b, rel_tol=rtol, abs_tol=atol) for a, b in zip(mine, theirs))


NEAR_RTOL = 1e-3  # an answer equal at this relative tolerance, and not at the checks' 1e-5, is a near miss


def _flat(x: Any) -> list:
    if hasattr(x, "detach"):  # a torch tensor
        x = x.detach().cpu().reshape(-1).tolist()
    elif hasattr(x, "tolist"):  # a numpy array or scalar
        x = x.tolist()
    if isinstance(x, (list, tuple)):
        return [y for item in x for y in _flat(item)]
    return [x]


def _grade(exercise: str, fn: Callable, cases: Sequence[tuple[tuple, dict, Any]], hint: str,
           compare: Callable[..., bool] = _close, causes: Sequence[Callable[..., str | None]] = ()) -> Grade:
    """Run fn(*args, **kwargs) on every case against azlib's value; print and return the grade.
    `compare(got, expected, rtol=...)` decides equality. A failure shows the first case that differs: its input,
    the learner's output and azlib's side by side (4 significant digits), a note where the difference has a
    recognisable cause (`causes`, then a sign flip, a common factor or a common offset), and the hint. Answers that
    all agree at NEAR_RTOL get the near-miss message instead (7 digits, no hint: a convention, not the idea,
    differs). A function that raises is shown its input, azlib's output there, and the hint."""
    wrong = []
    for args, kwargs, expected in cases:
        shown = _show_call(args, kwargs)  # before the call: a function that changes its input is shown what it got
        try:
            got = fn(*args, **kwargs)
        except NotImplementedError:
            return _report(Grade(exercise, "not done", f"{exercise}: not done yet. Fill in the function and run the "
                                 "cell again."))
        except Exception as err:  # the learner's bug, reported, never raised: the notebook must run on
            return _report(Grade(exercise, "failed", f"{exercise}: your function raised {type(err).__name__}: {err}\n"
                                 f"On the input ({shown}).\n  azlib: {_show(expected)}\nHint: {hint}"))
        if not compare(got, expected):
            wrong.append((shown, args, kwargs, got, expected))
    if not wrong:
        return _report(Grade(exercise, "passed", f"{exercise}: passed, {len(cases)} random cases agree with azlib."))
    shown, args, kwargs, got, expected = wrong[0]
    differ = f"{len(wrong)} of {len(cases)} random cases differ from azlib's"
    if all(compare(g, e, rtol=NEAR_RTOL) for *_, g, e in wrong):
        return _report(Grade(exercise, "failed", f"{exercise}: close, not yet equal: {differ}, but only in the "
                             f"4th significant digit or later (equal at relative tolerance {NEAR_RTOL:g}, not at "
                             "1e-05). The idea is right; a convention differs: a small constant (an epsilon) or where "
                             "it is added, n or n - 1, a rounding. The first of them:\n"
                             f"{_side_by_side(shown, got, expected, digits=7)}"))
    notes = [note for cause in (*causes, *_GENERIC_CAUSES) if (note := _cause(cause, args, kwargs, got, expected))]
    note = f"\nNote: {notes[0]}" if notes else ""
    return _report(Grade(exercise, "failed", f"{exercise}: not yet, {differ}. The first of them:\n"
                         f"{_side_by_side(shown, got, expected)}{note}\nHint: {hint}"))


def _side_by_side(shown: str, got: Any, expected: Any, digits: int = 4) -> str:
    """The failing input, the learner's output and azlib's, one per line so the values line up; for outputs of more
    than 8 numbers, also the first entry that differs when it is past the 8 shown."""
    lines = [f"  input: ({shown})", f"  yours: {_show(got, digits)}", f"  azlib: {_show(expected, digits)}"]
    mine, theirs = _numbers(got, expected), _numbers(expected, expected)
    if mine is not None and theirs is not None:
        if len(mine) != len(theirs):
            lines.append(f"  yours holds {len(mine)} numbers, azlib's {len(theirs)}")
        elif (i := next((i for i, (a, b) in enumerate(zip(mine, theirs))
                         if not math.isclose(a, b, rel_tol=1e-5, abs_tol=1e-6)), 0)) >= 8:  # past what is shown
            lines.append(f"  first difference, entry {i} of {len(theirs)} (flattened): yours "
                         f"{_show(mine[i], digits)}, azlib {_show(theirs[i], digits)}")
    return "\n".join(lines)


def _numbers(x: Any, like: Any) -> list[float] | None:
    """x's numbers in order (a dict's in the key order of `like`, when its keys are like's), or None when x is not
    numbers; True and False are not numbers here."""
    if isinstance(x, dict):
        if not isinstance(like, dict) or set(x) != set(like):
            return None
        x = [x[k] for k in like]
    try:
        flat = _flat(x)
    except Exception:  # whatever the learner returned
        return None
    if not flat or not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in flat):
        return None
    return [float(v) for v in flat]


def _cause(cause: Callable[..., str | None], args: tuple, kwargs: dict, got: Any, expected: Any) -> str | None:
    """cause(args, kwargs, mine, theirs) on the case's numbers, when both are numbers of the same count."""
    mine, theirs = _numbers(got, expected), _numbers(expected, expected)
    if mine is None or theirs is None or len(mine) != len(theirs):
        return None
    return cause(args, kwargs, mine, theirs)


def _near(a: float, b: float, rtol: float = 1e-4) -> bool:
    return math.isclose(a, b, rel_tol=rtol, abs_tol=1e-6)


def _sign_flipped(args, kwargs, mine: list[float], theirs: list[float]) -> str | None:
    if any(abs(b) > 1e-6 for b in theirs) and all(_near(a, -b) for a, b in zip(mine, theirs)):
        return "yours is azlib's with its sign flipped: whose point of view, or which way round a difference is taken?"
    return None


def _common_factor(mine: list[float], theirs: list[float]) -> float | None:
    """r when mine = r * theirs at every entry, at least two of them not 0."""
    if sum(abs(b) > 1e-9 for b in theirs) < 2 or any(abs(b) <= 1e-9 and abs(a) > 1e-6 for a, b in zip(mine, theirs)):
        return None
    ratios = [a / b for a, b in zip(mine, theirs) if abs(b) > 1e-9]
    return ratios[0] if all(_near(r, ratios[0]) for r in ratios) else None


def _scaled(args, kwargs, mine: list[float], theirs: list[float]) -> str | None:
    r = _common_factor(mine, theirs)
    if r is None or _near(r, 1.0) or _near(r, -1.0):
        return None
    return f"yours is azlib's times {r:.4g} at every entry: a scale (a divisor, a count, a factor) differs."


def _shifted(args, kwargs, mine: list[float], theirs: list[float]) -> str | None:
    if len(theirs) < 2:
        return None
    d = mine[0] - theirs[0]
    if abs(d) > 1e-6 and all(math.isclose(a - b, d, rel_tol=1e-4, abs_tol=1e-6) for a, b in zip(mine, theirs)):
        return f"yours is azlib's plus {d:.4g} at every entry: a constant term differs."
    return None


_GENERIC_CAUSES = (_sign_flipped, _scaled, _shifted)


def _show_call(args: tuple, kwargs: dict) -> str:
    return ", ".join([*map(_show, args), *(f"{k}={_show(v)}" for k, v in kwargs.items())])


def _show(x: Any, digits: int = 4) -> str:
    """A short repr: numbers to `digits` significant digits, a tensor or array of more than 8 numbers by its shape
    and first 8 entries (flattened), long lists cut at 8 items."""
    if hasattr(x, "shape") and hasattr(x, "tolist"):  # a torch tensor or numpy array
        x = x.detach() if hasattr(x, "detach") else x
        if math.prod(x.shape) > 8:
            return f"{type(x).__name__} of shape {tuple(x.shape)}, flattened: {_show(_flat(x), digits)}"
        x = x.tolist()
    if isinstance(x, float):
        return f"{x:.{digits}g}"
    if isinstance(x, (list, tuple)) and len(x) > 8:
        return "[" + ", ".join(_show(v, digits) for v in x[:8]) + f", ... ({len(x)} items)]"
    if isinstance(x, (list, tuple)):
        return "[" + ", ".join(_show(v, digits) for v in x) + "]"
    if isinstance(x, dict):
        return "{" + ", ".join(f"{k!r}: {_show(v, digits)}" for k, v in x.items()) + "}"
    text = repr(x)
    return text if len(text) <= 200 else text[:200] + "..."


def _report(grade: Grade) -> Grade:
    print(grade.message)
    return grade


# -- 01: group-relative advantages (azlib.grpo.group_advantages) -------------------------------------

def check_group_advantages(fn: Callable[[list[float]], Sequence[float]], seed: int | None = None) -> Grade:
    """fn(rewards of one group) -> one advantage per answer, as azlib.grpo.group_advantages (scale "group")."""
    import torch

    from azlib.grpo import group_advantages

    rng = random.Random(seed)
    cases = []
    for k in range(CASES):
        g = rng.randint(2, 12)
        if k == 0:
            rewards = [1.0] * g  # every answer alike: no spread
        elif k % 2:
            rewards = [float(rng.random() < 0.4) for _ in range(g)]  # a verifier's 0/1
        else:
            rewards = [round(rng.uniform(-2, 3), 3) for _ in range(g)]  # a graded reward
        expected = group_advantages(torch.tensor(rewards, dtype=torch.float64), torch.zeros(g, dtype=torch.long))
        cases.append(((rewards,), {}, expected.tolist()))
    return _grade("group advantages", fn, cases, causes=[_n_or_n_minus_1], hint=(
        "the advantage is centred by the group's mean and scaled by the group's spread. How is that spread estimated "
        "from a handful of samples (numpy's and torch's std differ by default), and what keeps the division finite "
        "when every reward is the same?"))


def _n_or_n_minus_1(args, kwargs, mine: list[float], theirs: list[float]) -> str | None:
    """The spread estimated with n where azlib divides by n - 1 (or the other way round)."""
    n, r = len(args[0]), _common_factor(mine, theirs)
    if r is None or n < 2 or not any(math.isclose(r, f, rel_tol=2e-3) for f in (math.sqrt(n / (n - 1)),
                                                                                math.sqrt((n - 1) / n))):
        return None
    return (f"yours is azlib's times {r:.4g}, which is sqrt({n}/{n - 1}) or its inverse for this group of {n}: "
            "the spread divides by n where it should divide by n - 1, or the other way round.")


def check_sequence_advantages(fn: Callable[[list[list[int]], list[int]], Any], seed: int | None = None) -> Grade:
    """fn(answers, correct) -> one advantage per token of each answer ([G][L]) for one prompt's group of answers of
    L tokens, as notebook 01's chain trains: azlib.bandit's reward (1 if every token is right) and GRPO advantage."""
    import torch

    from azlib import bandit

    rng = random.Random(seed)
    cases = []
    for k in range(CASES):
        length, tokens, g = rng.randint(2, 3), rng.randint(2, 4), rng.randint(2, 10)
        correct = [rng.randrange(tokens) for _ in range(length)]
        # answers near the right one: some right, some with only a later or only an earlier token wrong
        answers = [[t if rng.random() < 0.7 else rng.randrange(tokens) for t in correct] for _ in range(g)]
        if k == 0:  # a right first token, a wrong last one, beside a right answer
            answers[0], answers[1] = list(correct), [*correct[:-1], (correct[-1] + 1) % tokens]
        problem = bandit.Bandit.from_answers([correct], tokens)
        rewards = problem.reward(torch.zeros(g, dtype=torch.long), torch.tensor(answers))
        expected = bandit.group_advantages(rewards.to(torch.float64))[:, None].expand(g, length)
        cases.append(((answers, correct), {}, expected.tolist()))
    return _grade("sequence advantages", fn, cases,
                  "the verifier judges an answer once, as a whole, and GRPO turns the group's judgements into one "
                  "number per answer. Which positions of an answer receive that number, and does a right token in a "
                  "failed answer get any credit of its own?")


# -- 02: PUCT selection and the two-player backup (azlib.mcts.search) --------------------------------

def check_puct_score(fn: Callable[..., float], seed: int | None = None) -> Grade:
    """fn(q, prior, parent_visits, child_visits, c) -> the PUCT score azlib's search maximises."""
    from azlib.mcts.search import puct_scores
    from azlib.mcts.tree import Node

    rng = random.Random(seed)
    cases = []
    for _ in range(CASES):
        parent = rng.randint(1, 400)
        kwargs = {"q": rng.uniform(-1, 1), "prior": rng.uniform(0.01, 1), "parent_visits": parent,
                  "child_visits": rng.randint(0, parent - 1), "c": rng.uniform(0.5, 3)}
        child = Node(state=None, parent=0, action=None, prior=kwargs["prior"], depth=1, visits=kwargs["child_visits"])
        (expected,) = puct_scores([child], [kwargs["q"]], parent, kwargs["c"])
        cases.append(((), kwargs, expected))
    return _grade("PUCT score", fn, cases,
                  "exploitation (Q) plus an exploration bonus. The bonus is larger for moves the network likes, grows "
                  "slowly (not linearly) with the parent's visits, and shrinks as the child itself is visited.")


def check_negamax_backup(fn: Callable[[float, int], Sequence[float]], seed: int | None = None) -> Grade:
    """fn(leaf_value, depth) -> what one two-player backup adds to each value_sum on the path, root first. Every
    value_sum, the root's included, is from the view of the player who moved into that node (at the root: the
    player not to move there)."""
    from azlib.mcts.search import _apply
    from azlib.mcts.tree import Tree

    rng = random.Random(seed)
    cases = []
    for k in range(CASES):
        if k < 2:  # depths 1 and 2: a sign pattern anchored at the root, either way round, fails one of them
            depth, value = k + 1, rng.choice([-1.0, 1.0])
        else:
            depth, value = rng.randint(1, 7), rng.choice([-1.0, 1.0, round(rng.uniform(-1, 1), 3)])
        tree = Tree.with_root(None)
        for d in range(depth):
            tree.add_child(d, None, d, 1.0)
        _apply(tree, list(range(depth + 1)), 1, value, True)
        cases.append(((value, depth), {}, [n.value_sum for n in tree.nodes]))
    return _grade("negamax backup", fn, cases,
                  "whose point of view is each number in? leaf_value is for the player to move at the leaf; a node's "
                  "value_sum (the root's too) is for the player who moved into it. Start at the leaf, where the two "
                  "views first differ, and walk up one ply at a time: the path's length decides the root's sign.")


# -- 03: the teacher ensemble's weights (azlib.teachers.weights) --------------------------------------

def check_teacher_weights(fn: Callable[..., dict[str, float]], seed: int | None = None) -> Grade:
    """fn(scores, values, ema_rate, temperature, floor) -> each teacher's draw weight after one credit."""
    from azlib.teachers import TeacherWeights

    rng = random.Random(seed)
    cases = []
    for k in range(CASES):
        names = [f"teacher{i}" for i in range(rng.randint(2, 5))]
        scores = {n: None if rng.random() < 0.3 else round(rng.uniform(0, 1), 3) for n in names}
        if k == 0:
            scores[names[0]] = round(rng.uniform(0, 1), 3)
            scores[names[1]] = None  # a teacher never credited beside one that was
        values = {n: [round(rng.uniform(0, 1), 3) for _ in range(rng.randint(1, 4))]
                  for n in names if rng.random() < 0.7}
        if k == 0:
            values.pop(names[1], None)
        kwargs = {"ema_rate": round(rng.uniform(0.1, 0.9), 2), "temperature": round(rng.uniform(0.05, 1.0), 2),
                  "floor": round(rng.uniform(0.0, 0.3), 2)}
        weights = TeacherWeights(names, scores=dict(scores), **kwargs).credit(values)
        cases.append(((dict(scores), {n: list(v) for n, v in values.items()}), kwargs, weights))
    return _grade("teacher weights", fn, cases, compare=_same_weights, hint=(
        "two steps. First each credited teacher's score moves part of the way (ema_rate) toward the mean value it "
        "earned; an uncredited one keeps its score. Then the scores become probabilities: sharpened by the "
        "temperature, mixed with a floor shared equally, and a teacher with no score yet stands in at the others' mean."))


def _same_weights(mine: Any, theirs: dict[str, float], rtol: float = 1e-5) -> bool:
    return isinstance(mine, dict) and set(mine) == set(theirs) and _close([mine[n] for n in theirs],
                                                                          list(theirs.values()), rtol=rtol)


# -- 04: the k3 KL and its ratio-corrected gradient (azlib.grpo.token_losses) -------------------------

def _kl_case(rng: random.Random):
    import torch

    gen = torch.Generator().manual_seed(rng.randrange(2**31))
    shape = (rng.randint(1, 4), rng.randint(1, 6))
    logp = -torch.rand(shape, generator=gen, dtype=torch.float64) * 4 - 0.01
    ref = logp + torch.randn(shape, generator=gen, dtype=torch.float64) * 0.7
    old = logp + torch.randn(shape, generator=gen, dtype=torch.float64) * 0.3
    return logp, old, ref


def _azlib_kl(logp, old, ref):
    """azlib's KL term with beta 1 and zero advantages: per token ratio * k3, its k3, and d(ratio k3)/d logp."""
    import torch

    from azlib.grpo import GRPOSettings, token_losses

    logp = logp.clone().requires_grad_(True)
    parts = token_losses(logp, old, ref, torch.zeros(logp.shape[0], dtype=logp.dtype),
                         GRPOSettings(beta=1.0, kl_ratio_correction=True))
    parts.loss.sum().backward()
    return parts.kl.detach(), logp.grad


def check_k3(fn: Callable, seed: int | None = None) -> Grade:
    """fn(logp, ref_logp) -> the k3 estimate per token, as azlib.grpo.token_losses computes it."""
    rng = random.Random(seed)
    cases = []
    for _ in range(CASES):
        logp, old, ref = _kl_case(rng)
        cases.append(((logp.clone(), ref.clone()), {}, _azlib_kl(logp, old, ref)[0]))
    return _grade("k3 KL", fn, cases,
                  "k3 estimates KL(pi || pi_ref) from tokens sampled from pi, using the log-ratio x = log pi_ref - log pi. "
                  "It must be >= 0 for every token and average to the KL; which function of x is both?")


def check_kl_gradient(fn: Callable, seed: int | None = None) -> Grade:
    """fn(logp, old_logp, ref_logp) -> d(ratio * k3)/d logp per token (ratio = exp(logp - old_logp), old fixed)."""
    rng = random.Random(seed)
    cases = []
    for _ in range(CASES):
        logp, old, ref = _kl_case(rng)
        cases.append(((logp.clone(), old.clone(), ref.clone()), {}, _azlib_kl(logp, old, ref)[1]))
    return _grade("ratio-corrected KL gradient", fn, cases,
                  "differentiate the product ratio * k3 with respect to log pi, with the old log-probs held fixed "
                  "(the product rule; d ratio / d log pi = ratio). The sum simplifies a lot.")


# -- 05: the Wilson interval and the exact McNemar test (azlib.statistics) ---------------------------

def check_wilson(fn: Callable[..., tuple[float, float]], seed: int | None = None) -> Grade:
    """fn(correct, n, z) -> (low, high), azlib.statistics.wilson_interval."""
    from azlib.statistics import wilson_interval

    rng = random.Random(seed)
    cases = []
    for k in range(CASES):
        n = rng.choice([rng.randint(1, 20), rng.randint(20, 500)])
        correct = [0, n][k] if k < 2 else rng.randint(0, n)  # the edges, where the normal interval fails
        z = rng.choice([1.96, 1.645, 2.576])
        cases.append(((correct, n), {"z": z}, list(wilson_interval(correct, n, z))))
    return _grade("Wilson interval", fn, cases,
                  "p +- z * sqrt(p(1-p)/n) (Wald) collapses to a point at 0/n and n/n. Wilson instead asks which true "
                  "proportions would put the observed one within z standard errors, with the error computed at the "
                  "true proportion: solve that quadratic.")


def check_mcnemar(fn: Callable[[int, int], float], seed: int | None = None) -> Grade:
    """fn(only_a, only_b) -> the two-sided exact McNemar p-value, azlib.statistics.mcnemar_exact."""
    from azlib.statistics import mcnemar_exact

    rng = random.Random(seed)
    cases = []
    for k in range(CASES):
        only_a, only_b = rng.randint(0, 25), rng.randint(0, 25)
        if k == 0:
            only_a = only_b = rng.randint(1, 10)  # a tie
        if only_a + only_b == 0:
            only_b = 1
        cases.append(((only_a, only_b), {}, mcnemar_exact(only_a, only_b)))
    return _grade("exact McNemar", fn, cases,
                  "only the discordant problems count. Under 'no difference' each of them is equally likely to go "
                  "either way: how likely is a split at least this uneven, in either direction? Exact means counting, "
                  "not a chi-square approximation; a probability is never above 1.")


# -- 06: RLT's teacher reward parts (azlib.rlt.rewards) ---------------------------------------------

def _logps(rng: random.Random, n: int, low: float = -6.0) -> list[float]:
    return [round(rng.uniform(low, -0.01), 4) for _ in range(n)]


def check_r_ss(fn: Callable[[list[float], float], float], seed: int | None = None) -> Grade:
    """fn(solution_logp, alpha) -> r_SS of one explanation, azlib.rlt.rewards.solution_reward."""
    from azlib.rlt.rewards import padded, solution_reward

    rng = random.Random(seed)
    cases = []
    for _ in range(CASES):
        logp, alpha = _logps(rng, rng.randint(1, 20)), round(rng.uniform(0.01, 0.5), 3)
        cases.append(((logp, alpha), {}, solution_reward(*padded([logp]), alpha).item()))
    return _grade("r_SS", fn, cases,
                  "how well the student reproduces the solution, on average per token, plus a term that stops one "
                  "badly explained token from hiding in that average: which single token is that?")


def check_r_kl(fn: Callable[[list[float], list[float], float], float], seed: int | None = None) -> Grade:
    """fn(teacher_logp, student_logp, alpha) -> r_KL of one explanation, azlib.rlt.rewards.kl_reward."""
    from azlib.rlt.rewards import kl_reward, padded

    rng = random.Random(seed)
    cases = []
    for _ in range(CASES):
        n = rng.randint(1, 20)
        teacher, student, alpha = _logps(rng, n, -3.0), _logps(rng, n, -8.0), round(rng.uniform(0.01, 0.5), 3)
        t, mask = padded([teacher])
        cases.append(((teacher, student, alpha), {}, kl_reward(t, padded([student])[0], mask, alpha).item()))
    return _grade("r_KL", fn, cases,
                  "per explanation token, how much more likely the teacher (who saw the solution) found it than the "
                  "student (who did not); averaged, plus a term for the single token the student finds most unnatural.")


# -- 07: the referee's candidate rewards (azlib.referee.objective) -----------------------------------

def check_candidate_rewards(fn: Callable[..., Sequence[float]], seed: int | None = None) -> Grade:
    """fn(ids, target, referee_logits, cfg) -> one reward per candidate id at one position, as
    azlib.referee.objective.referee_rewards (ids distinct and holding the target; referee_logits None when
    cfg.referee_weight is 0)."""
    import torch

    from azlib.referee import RefereeRLSettings, referee_rewards

    rng = random.Random(seed)
    cases = []
    for k in range(CASES):
        vocab = rng.randint(8, 40)
        ids = rng.sample(range(vocab), rng.randint(3, min(12, vocab)))
        target = rng.choice(ids)
        cfg = RefereeRLSettings(reality_weight=round(rng.uniform(0.3, 1.0), 2),
                              referee_weight=0.0 if k % 4 == 0 else round(rng.uniform(0.1, 0.8), 2),
                              smoothing=round(rng.uniform(0.02, 0.3), 2),
                              reward_scale=rng.choice([100.0, round(rng.uniform(0.5, 5), 2)]),
                              reward_clamp=round(rng.uniform(0.5, 3.0), 2))
        referee = [round(rng.gauss(0, 2), 3) for _ in range(vocab)] if cfg.referee_weight else None
        if k in (1, 2):  # two candidates paid, the larger payment above the clamp: shrinking all payments by one
            # factor and capping each at the clamp differ (k = 1: both above the clamp; k = 2: one below it)
            ids = rng.sample(range(vocab), 4)
            target, rival = ids[0], ids[1]
            referee = [0.0] * vocab
            referee[target] = referee[rival] = 4.0
            cfg = RefereeRLSettings(reality_weight=0.3, referee_weight=0.8, smoothing=0.3,
                                  reward_scale=100.0 if k == 1 else 3.0, reward_clamp=1.5)
        expected = referee_rewards(torch.tensor([ids]), torch.ones(1, len(ids), dtype=torch.bool),
                                   torch.tensor([target]), torch.tensor([referee]) if referee else None, cfg)
        cases.append(((list(ids), target, referee, cfg), {}, expected[0].tolist()))
    return _grade("candidate rewards", fn, cases,
                  "build an ideal distribution over the candidates from two opinions: reality (smoothed one-hot on the "
                  "target, the rest shared by the other candidates) and the referee (its probabilities), each raised to "
                  "its weight, renormalised. Only candidates above an even share are paid, in proportion to it; when "
                  "the largest payment would pass the clamp, every payment shrinks by one common factor, so the paid "
                  "candidates keep their ratios.")


# -- 08: Countdown's solvability oracle (azlib.games.countdown.rules.solvable) ------------------------------

def _loose_reach(numbers: tuple[int, ...], divide: Callable[[Any, Any], Any]) -> set:
    """Every value the numbers reach, each used once, when a division need not come out whole (`divide(a, b)`, b
    not 0) and nothing else is refused: the values a looser reading of the rules would allow."""
    if len(numbers) == 1:
        return set(numbers)
    out = set()
    for i in range(len(numbers)):
        for j in range(len(numbers)):
            if i != j:
                rest = tuple(x for k, x in enumerate(numbers) if k not in (i, j))
                a, b = numbers[i], numbers[j]
                values = {a + b, a * b} | ({a - b} if a >= b else set()) | ({divide(a, b)} if b else set())
                for value in values:
                    out |= _loose_reach((*rest, value), divide) if rest else {value}
    return out


def _same_truth(mine: Any, theirs: bool, rtol: float | None = None) -> bool:
    try:
        return mine in (0, 1) and bool(mine) == theirs  # True, False (numpy's too), or 1 and 0
    except (TypeError, ValueError):
        return False


def check_solvable(fn: Callable[[list[int], int], bool], seed: int | None = None) -> Grade:
    """fn(numbers, target) -> whether the numbers can still reach the target under Countdown's rules, as
    azlib.games.countdown.rules.solvable(State(target, numbers))."""
    import itertools
    from fractions import Fraction

    from azlib.games.countdown.rules import State, reachable, solvable

    rng = random.Random(seed)
    cases = []
    for k in range(CASES):
        while True:
            numbers = [rng.randint(1, 30 if k % 4 == 2 else 99) for _ in range(rng.choice([2, 3, 3, 4]))]
            whole = reachable(tuple(sorted(numbers)))
            if k % 4 == 0:  # reachable: some target the numbers make, every one of them used
                pool = {t for t in whole if 1 <= t <= 1000}
            elif k % 4 == 1:  # made by some of the numbers, or one of them already, but not by all of them
                parts = set(numbers).union(*(reachable(tuple(sorted(c))) for r in range(2, len(numbers))
                                             for c in itertools.combinations(numbers, r)))
                pool = {t for t in parts if 1 <= t <= 1000} - whole
            elif k % 4 == 2:  # made only through a division that does not come out whole (a fraction, or floored)
                loose = _loose_reach(tuple(numbers), Fraction if k % 8 == 2 else int.__floordiv__)
                pool = {int(t) for t in loose if t == int(t) and 1 <= t <= 1000} - whole
            else:  # a target as the game draws them, reachable or not
                pool = set(range(10, 101))
            if pool:
                break
        target = rng.choice(sorted(pool))
        cases.append(((list(numbers), target), {}, solvable(State(target, tuple(numbers)))))
    return _grade("solvability oracle", fn, cases, compare=_same_truth, hint=(
        "the game ends when one number is left, and it is won only if that number is the target: every number must "
        "be used, each once. Each move replaces two numbers by one result, and the rules accept a result only if it "
        "is a whole number that is not negative. Try every pair, in both orders, with every operator, and ask the "
        "same question of what is left."))


# -- Concept checks: multiple choice, where code would be contrived ------------------------------------
# The question and its lettered choices are in the notebook; here only a digest of the right letter, so
# reading this file does not give the answer away (notebooks/solutions.py has the letters, with reasons).

@dataclass(frozen=True)
class Concept:
    title: str
    letters: str  # the choices the notebook offers
    digest: str  # _digest(key, right letter)
    hint: str  # the idea to think about, never the letter


def _digest(key: str, letter: str) -> str:
    import hashlib

    return hashlib.sha256(f"azlib concept check {key}: {letter}".encode()).hexdigest()[:16]


CONCEPTS = {
    "01_loss_near_zero": Concept(
        "GRPO's loss near 0", "abcd", "bcaa25770d86d33e",
        "on a step's first update the old policy is the current one. What is rho there, and what do a group's "
        "advantages add up to? Then: is a function that is 0 at a point also flat there?"),
    "01_all_wrong_group": Concept(
        "a group with every answer wrong", "abcd", "abbfee87bfd48c01",
        "work out each method's advantage for these eight rewards: GRPO's reference point is the group's own mean "
        "(and std), the other's is the running mean b = 0.3. How does a step move a log-probability whose advantage "
        "is 0, and one whose advantage is negative?"),
    "02_visit_target": Concept(
        "the visit distribution as the policy target", "abcd", "80f952c8cc675a4d",
        "ask what 64 simulations add to the network's first guess at a position. If that first guess already matched "
        "their outcome, where would the following round begin?"),
    "02_negamax": Concept(
        "what the negamax sign flip buys", "abcd", "116fa938c838ee7b",
        "picture a position where O is about to play. Which of O's replies should the search prefer there, and whose "
        "outcome must the compared numbers describe so that one rule, blind to who plays, makes that pick?"),
    "03_wrong_branch": Concept(
        "a 'wrong' branch under the correctness reward", "abcd", "bc43bd7cb9aa8a16",
        "list every input the correctness reward reads, then reread teacher_values in the section 'Weights over a few "
        "searches'. Is the right/wrong tag an input of either?"),
    "03_identical_teachers": Concept(
        "telling two teachers apart", "abcd", "3b71b6444ea7f882",
        "a weight gap is a score gap divided by the temperature, then exponentiated. Which change makes each score "
        "itself less noisy, instead of magnifying or hiding the gap, and what would show the size of gap that chance "
        "alone makes?"),
    "04_answer_accuracy": Concept(
        "what answer_accuracy measures", "abcd", "59f9c0e5cc5b1fb5",
        "who chooses the answer that gets scored, and what does that chooser know that the student, answering a "
        "problem alone, would not?"),
    "04_sft_vs_grpo": Concept(
        "imitation and GRPO on the same groups", "abcd", "46528897d813644d",
        "write one group's contribution to each update's loss: for GRPO through its advantages, for imitation through "
        "the set of answers it fits. Then do the same for a group holding a failed attempt."),
    "05_transfer": Concept(
        "a control set of your own", "abcd", "427eb52a2f4c7a93",
        "a control set changes one thing and keeps the rest. For each candidate, list what differs from the problems "
        "the arm was trained on: if the gain vanishes on a set that changes two things at once, which one do you blame?"),
    "05_one_seed": Concept(
        "one seed's McNemar p-value", "abcd", "d6b0d4849d59839f",
        "list the sources of chance behind the number. Which one does this test model, and which would change if you "
        "reran with another seed? The question is about a method, not two fixed models."),
    "06_r_kl": Concept(
        "what r_KL penalises", "abcd", "20de2b71ac416b3c",
        "kl_j compares two models on the same text. What does one of them know that the other does not, and which "
        "explanations exploit that difference?"),
    "06_lambda_zero": Concept(
        "RLT's reward without its KL part", "abcd", "6b114909a352a272",
        "r_SS grows with the log-likelihood of s read after t. Which t raises that most directly, and which part of r "
        "charges for it once λ > 0?"),
    "07_frozen_referee": Concept(
        "a co-trained referee vs a frozen one", "abcd", "15b41188f1db8e4f",
        "where could a referee's extra knowledge come from? Compare a model fitted to the same text as the student "
        "with one trained elsewhere, as in distillation."),
    "07_beta_zero": Concept(
        "the ground-truth-only arm", "abcd", "f3eafcc4a4862920",
        "with β = 0, compare each q with the even share 1/|A_t|: which candidates get a payment, and of what size? "
        "Put that into L_RL."),
    "08_visit_shares": Concept(
        "the visit shares as the policy target", "abcd", "7e0f6ddb98e5c86d",
        "think about the next round at the same state: its candidates are sampled from the trained model. What "
        "becomes of an alternative that the model was taught to give almost no probability?"),
    "08_oracle_arm": Concept(
        "what the oracle arm measures", "abcd", "4587442bcfecc5e1",
        "to run this arm on a fresh puzzle, what must be available at each leaf, and what else would that same tool "
        "do for the puzzle on its own?"),
}


def concept_check(key: str, answer: str | None) -> Grade:
    """Grade a multiple-choice answer (a letter) to the notebook's question `key`; None is "not done".
    Right or "not yet" with a hint at the idea: never which letter is right, and the same words for every
    wrong letter."""
    concept = CONCEPTS[key]
    if answer is None:
        return _report(Grade(concept.title, "not done", f"{concept.title}: not done yet. Set answer to a letter "
                             f"({', '.join(concept.letters)}) and run the cell again."))
    letter = str(answer).strip().strip("()").strip().lower()
    if len(letter) != 1 or letter not in concept.letters:
        return _report(Grade(concept.title, "failed", f"{concept.title}: answer with one letter of "
                             f"{', '.join(concept.letters)} (got {answer!r})."))
    if _digest(key, letter) == concept.digest:
        return _report(Grade(concept.title, "passed", f"{concept.title}: right. The reasoning behind each choice is "
                             "in notebooks/solutions.py."))
    return _report(Grade(concept.title, "failed", f"{concept.title}: not yet.\nHint: {concept.hint}"))
