"""The exercise graders (azlib.lab.exercises): every check passes the worked solution (notebooks/solutions.py),
fails plausible wrong answers showing the first failing input with the learner's output beside azlib's, reports a
NotImplementedError stub as not done, and never prints a concept check's right letter."""

import importlib.util
import math
import re

import pytest
import torch
from scipy import stats

from azlib.lab import config, exercises

_spec = importlib.util.spec_from_file_location("solutions", config.NOTEBOOKS_DIR / "solutions.py")
solutions = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(solutions)


def _population_std_advantages(rewards):
    n = len(rewards)
    mean = sum(rewards) / n
    std = math.sqrt(sum((r - mean) ** 2 for r in rewards) / n)  # np.std's default
    return [(r - mean) / (std + 1e-4) for r in rewards]


def _unscaled_advantages(rewards):
    mean = sum(rewards) / len(rewards)
    return [r - mean for r in rewards]


def _teacher_weights_without_ema(scores, values, ema_rate, temperature, floor):
    return solutions.teacher_weights(scores, values, 1.0, temperature, floor)  # the score jumps to the new mean


def _teacher_weights_without_floor(scores, values, ema_rate, temperature, floor):
    return solutions.teacher_weights(scores, values, ema_rate, temperature, 0.0)


def _teacher_weights_unknown_as_zero(scores, values, ema_rate, temperature, floor):
    return solutions.teacher_weights({n: 0.0 if s is None else s for n, s in scores.items()}, values, ema_rate,
                                     temperature, floor)


def _wald(correct, n, z=1.96):
    p = correct / n
    half = z * math.sqrt(p * (1 - p) / n)
    return max(0.0, p - half), min(1.0, p + half)


def _wilson_without_correction_term(correct, n, z=1.96):
    p = correct / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z / (1 + z * z / n) * math.sqrt(p * (1 - p) / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def _mcnemar_chi_square(only_a, only_b):
    return float(stats.chi2.sf((only_a - only_b) ** 2 / (only_a + only_b), 1))


def _mcnemar_one_sided(only_a, only_b):
    n, k = only_a + only_b, min(only_a, only_b)
    return sum(math.comb(n, i) for i in range(k + 1)) / 2**n


def _referee_rewards_all_paid(ids, target, referee_logits, cfg):
    """Every candidate paid in proportion to q: the filter at the even share 1/|A| forgotten."""
    size = len(ids)
    reality = [1 - cfg.smoothing if a == target else cfg.smoothing / (size - 1) for a in ids]
    log_ideal = [cfg.reality_weight * math.log(r) for r in reality]
    if cfg.referee_weight > 0:
        log_z = math.log(sum(math.exp(x) for x in referee_logits))
        log_ideal = [li + cfg.referee_weight * (referee_logits[a] - log_z) for li, a in zip(log_ideal, ids)]
    weights = [math.exp(x) for x in log_ideal]
    raw = [cfg.reward_scale * w / sum(weights) for w in weights]
    return [r * min(1.0, cfg.reward_clamp / max(raw)) for r in raw]


def _referee_rewards_unclamped(ids, target, referee_logits, cfg):
    from dataclasses import replace

    return solutions.candidate_rewards(ids, target, referee_logits, replace(cfg, reward_clamp=1e9))


def _referee_rewards_smoothing_over_all(ids, target, referee_logits, cfg):
    from dataclasses import replace

    # the smoothing mass spread over |A| candidates instead of the |A| - 1 others
    size = len(ids)
    return solutions.candidate_rewards(ids, target, referee_logits,
                                       replace(cfg, smoothing=cfg.smoothing * (size - 1) / size))


def _referee_rewards_clamp_each(ids, target, referee_logits, cfg):
    """Each payment capped at the clamp on its own, instead of all shrunk by one factor."""
    from dataclasses import replace

    raw = solutions.candidate_rewards(ids, target, referee_logits, replace(cfg, reward_clamp=1e12))
    return [min(r, cfg.reward_clamp) for r in raw]


def _negamax_alternating_from_the_root(leaf_value, depth):
    return [leaf_value if i % 2 == 0 else -leaf_value for i in range(depth + 1)]


def _negamax_alternating_from_the_root_negated(leaf_value, depth):
    return [-leaf_value if i % 2 == 0 else leaf_value for i in range(depth + 1)]


def _solvable_with_unused_numbers(numbers, target):
    """Won as soon as some of the numbers make the target: the rest may be left unused."""
    import itertools

    return any(solutions.solvable(list(part), target) for r in range(1, len(numbers) + 1)
               for part in itertools.combinations(numbers, r))


def _solvable_with_loose_division(numbers, target, divide):
    if len(numbers) == 1:
        return numbers[0] == target
    for i, a in enumerate(numbers):
        for j, b in enumerate(numbers):
            if i != j:
                rest = [x for k, x in enumerate(numbers) if k not in (i, j)]
                results = [a + b, a * b] + ([a - b] if a >= b else []) + ([divide(a, b)] if b else [])
                if any(_solvable_with_loose_division(rest + [r], target, divide) for r in results):
                    return True
    return False


def _solvable_with_fractions(numbers, target):
    """a / b allowed when it does not come out whole (exact fractions)."""
    from fractions import Fraction

    return _solvable_with_loose_division(numbers, target, Fraction)


def _solvable_with_floor_division(numbers, target):
    """a / b read as Python's a // b: the remainder dropped."""
    return _solvable_with_loose_division(numbers, target, lambda a, b: a // b)


CHECKS = {
    "group_advantages": (exercises.check_group_advantages, solutions.group_advantages,
                         [_population_std_advantages, _unscaled_advantages]),
    "sequence_advantages": (exercises.check_sequence_advantages, solutions.sequence_advantages, [
        lambda answers, correct: [list(row) for row in zip(*(  # each position its own reward and group
            solutions.group_advantages([float(a[i] == correct[i]) for a in answers]) for i in range(len(correct))))],
        lambda answers, correct: [[0.0] * (len(correct) - 1) + [adv] for adv in  # the last token only
                                  solutions.group_advantages([float(a == correct) for a in answers])],
        lambda answers, correct: [[adv] * len(correct) for adv in  # partial credit: the share of right tokens
                                  solutions.group_advantages([sum(map(int.__eq__, a, correct)) / len(correct)
                                                              for a in answers])]]),
    "puct_score": (exercises.check_puct_score, solutions.puct_score, [
        lambda q, prior, parent_visits, child_visits, c: q + c * math.sqrt(parent_visits) / (1 + child_visits),
        lambda q, prior, parent_visits, child_visits, c: q + c * prior * parent_visits / (1 + child_visits),
        lambda q, prior, parent_visits, child_visits, c: q + c * prior * math.sqrt(parent_visits) / max(child_visits, 1)]),
    "negamax_backup": (exercises.check_negamax_backup, solutions.negamax_backup, [
        lambda v, depth: [v] * (depth + 1),  # no sign flip: a single-agent backup
        lambda v, depth: [-x for x in solutions.negamax_backup(v, depth)],  # flipped from the wrong end
        _negamax_alternating_from_the_root, _negamax_alternating_from_the_root_negated]),
    "teacher_weights": (exercises.check_teacher_weights, solutions.teacher_weights,
                        [_teacher_weights_without_ema, _teacher_weights_without_floor, _teacher_weights_unknown_as_zero]),
    "k3": (exercises.check_k3, solutions.k3, [
        lambda logp, ref: ref - logp,  # k1
        lambda logp, ref: torch.exp(logp - ref) - (logp - ref) - 1]),  # the other direction
    "kl_gradient": (exercises.check_kl_gradient, solutions.kl_gradient, [
        lambda logp, old, ref: 1 - torch.exp(ref - logp),  # k3's own gradient, no ratio on the term
        lambda logp, old, ref: logp - ref]),  # the on-policy value: forgets that the ratio is not 1
    "wilson": (exercises.check_wilson, solutions.wilson, [_wald, _wilson_without_correction_term]),
    "mcnemar": (exercises.check_mcnemar, solutions.mcnemar, [_mcnemar_chi_square, _mcnemar_one_sided]),
    "r_ss": (exercises.check_r_ss, solutions.r_ss, [
        lambda logp, alpha: sum(logp) / len(logp) + alpha * max(logp),
        lambda logp, alpha: sum(logp) + alpha * min(logp)]),
    "r_kl": (exercises.check_r_kl, solutions.r_kl, [
        lambda t, s, alpha: solutions.r_kl(s, t, alpha),  # the log-ratio the wrong way round
        lambda t, s, alpha: sum(a - b for a, b in zip(t, s)) / len(t)]),  # no max term
    "candidate_rewards": (exercises.check_candidate_rewards, solutions.candidate_rewards,
                          [_referee_rewards_all_paid, _referee_rewards_unclamped, _referee_rewards_smoothing_over_all,
                           _referee_rewards_clamp_each]),
    "solvable": (exercises.check_solvable, solutions.solvable,
                 [_solvable_with_unused_numbers, _solvable_with_fractions, _solvable_with_floor_division]),
}


@pytest.mark.parametrize("name", CHECKS)
@pytest.mark.parametrize("seed", [0, 1, 2, None])  # None: fresh cases, as a learner gets them
def test_the_solution_passes(name, seed, capsys):
    check, solution, _ = CHECKS[name]
    grade = check(solution, seed=seed)
    assert grade.passed, grade.message
    assert "passed" in capsys.readouterr().out


@pytest.mark.parametrize("name", CHECKS)
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_plausible_wrong_answers_fail_with_a_hint(name, seed, capsys):
    check, _, wrong = CHECKS[name]
    assert len(wrong) >= 2
    for fn in wrong:
        grade = check(fn, seed=seed)
        assert grade.status == "failed", (name, fn)
        assert "Hint:" in grade.message
        assert grade.message in capsys.readouterr().out


@pytest.mark.parametrize("name, near_miss", [
    ("candidate_rewards", _referee_rewards_clamp_each),
    ("negamax_backup", _negamax_alternating_from_the_root),
    ("negamax_backup", _negamax_alternating_from_the_root_negated)])
def test_a_near_miss_fails_on_every_draw(name, near_miss, capsys):
    check, solution, _ = CHECKS[name]
    passed = [seed for seed in range(200) if check(near_miss, seed=seed).status != "failed"]
    assert not passed, f"{near_miss.__name__} passes {name} at seeds {passed[:5]}"
    assert all(check(solution, seed=seed).passed for seed in range(200))
    capsys.readouterr()


def _advantages_with_a_small_epsilon(rewards):
    n = len(rewards)
    mean = sum(rewards) / n
    std = math.sqrt(sum((r - mean) ** 2 for r in rewards) / (n - 1))
    return [(r - mean) / (std + 1e-8) for r in rewards]


def _advantages_with_epsilon_inside_the_root(rewards):
    n = len(rewards)
    mean = sum(rewards) / n
    return [(r - mean) / math.sqrt(sum((x - mean) ** 2 for x in rewards) / (n - 1) + 1e-8) for r in rewards]


NEAR = "close, not yet equal"


@pytest.mark.parametrize("near_miss", [_advantages_with_a_small_epsilon, _advantages_with_epsilon_inside_the_root])
def test_an_epsilon_convention_gets_the_near_miss_message_not_the_hint(near_miss, capsys):
    grades = [exercises.check_group_advantages(near_miss, seed=seed) for seed in range(20)]
    assert all(g.status == "failed" for g in grades)
    near = [g for g in grades if NEAR in g.message]
    # A group whose rewards nearly tie (std ~ 0.01) makes the epsilon a 1% matter, not a near miss: rare draws.
    assert len(near) >= 16, f"{len(near)} of 20"
    assert all("relative tolerance 0.001" in g.message and "Hint:" not in g.message for g in near)
    capsys.readouterr()


@pytest.mark.parametrize("name", CHECKS)
def test_a_conceptual_error_gets_the_hint_not_the_near_miss_message(name, capsys):
    check, _, wrong = CHECKS[name]
    for fn in wrong:
        for seed in range(5):
            message = check(fn, seed=seed).message
            assert "Hint:" in message and NEAR not in message, (name, fn, seed)
    capsys.readouterr()


@pytest.mark.parametrize("name", ["group_advantages", "k3", "candidate_rewards"])
def test_a_function_that_raises_is_shown_its_input_and_the_hint(name, capsys):
    check, _, _ = CHECKS[name]
    seen = []

    def crash(*args, **kwargs):
        seen.append(args)
        raise ValueError("the learner's bug")

    grade = check(crash, seed=0)
    assert grade.status == "failed"
    assert "raised ValueError: the learner's bug" in grade.message
    assert f"On the input ({exercises._show_call(seen[0], {})})" in grade.message
    assert "\nHint: " in grade.message and len(grade.message.split("Hint: ")[1]) > 40
    capsys.readouterr()


def test_inputs_are_shown_short():
    assert exercises._show(torch.zeros(4, 6, dtype=torch.float64)) == \
        "Tensor of shape (4, 6), flattened: [0, 0, 0, 0, 0, 0, 0, 0, ... (24 items)]"
    assert exercises._show(torch.tensor([[0.5, -1.0]])) == "[[0.5, -1]]"
    assert exercises._show(list(range(20))) == "[0, 1, 2, 3, 4, 5, 6, 7, ... (20 items)]"
    assert exercises._show(2 / 3) == "0.6667" and exercises._show(2 / 3, digits=7) == "0.6666667"


@pytest.mark.parametrize("name", CHECKS)
def test_a_stub_is_not_done_and_nothing_raises(name, capsys):
    check, _, _ = CHECKS[name]

    def stub(*args, **kwargs):
        raise NotImplementedError

    assert check(stub).status == "not done"
    assert "not done yet" in capsys.readouterr().out
    assert check(lambda *a, **k: 1 / 0).status == "failed", "a learner's crash is reported, not raised"


_COMPARE = {"teacher_weights": exercises._same_weights, "solvable": exercises._same_truth}


@pytest.mark.parametrize("name", CHECKS)
@pytest.mark.parametrize("seed", [0, 1])
def test_a_failure_shows_the_first_failing_input_with_the_learners_and_the_expected_output(name, seed, capsys):
    check, solution, wrong = CHECKS[name]
    compare = _COMPARE.get(name, exercises._close)
    for fn in wrong[:2]:
        calls = []

        def recorded(*args, **kwargs):
            calls.append((exercises._show_call(args, kwargs), args, kwargs, fn(*args, **kwargs)))
            return calls[-1][-1]

        grade = check(recorded, seed=seed)
        shown, args, kwargs, got = next(c for c in calls if not compare(c[3], solution(*c[1], **c[2])))
        expected = solution(*args, **kwargs)
        lines = grade.message.split("\n")
        assert f"  input: ({shown})" in lines, (name, grade.message)
        assert f"  yours: {exercises._show(got)}" in lines, (name, grade.message)
        assert f"  azlib: {exercises._show(expected)}" in lines, (name, grade.message)
        assert lines.index(f"  yours: {exercises._show(got)}") + 1 == lines.index(f"  azlib: {exercises._show(expected)}")
        assert "Hint: " in grade.message
    capsys.readouterr()


def test_a_function_that_raises_is_shown_azlibs_output_for_its_input(capsys):
    grade = exercises.check_mcnemar(lambda only_a, only_b: 1 / 0, seed=0)
    only_a, only_b = (int(x) for x in grade.message.split("On the input (")[1].split(")")[0].split(", "))
    assert f"  azlib: {exercises._show(solutions.mcnemar(only_a, only_b))}" in grade.message
    capsys.readouterr()


@pytest.mark.parametrize("name, fn, note", [
    ("group_advantages", _population_std_advantages, "divides by n where it should divide by n - 1"),
    ("group_advantages", _unscaled_advantages, "a scale (a divisor, a count, a factor) differs"),
    ("negamax_backup", lambda v, depth: [-x for x in solutions.negamax_backup(v, depth)], "sign flipped"),
    ("candidate_rewards", _referee_rewards_unclamped, "a scale (a divisor, a count, a factor) differs"),
    ("group_advantages", lambda rewards: [a + 0.5 for a in solutions.group_advantages(rewards)], "plus 0.5 at every")])
def test_a_recognisable_cause_gets_a_note_beside_the_hint(name, fn, note, capsys):
    check = CHECKS[name][0]
    grades = [check(fn, seed=seed) for seed in range(3)]
    assert any("Note: yours is azlib's" in g.message and note in g.message for g in grades), grades[0].message
    assert all("Hint: " in g.message for g in grades)
    assert "Note:" not in exercises.check_k3(CHECKS["k3"][2][0], seed=0).message, "no cause named where none fits"
    capsys.readouterr()


def test_every_notebook_has_a_graded_exercise_and_no_printed_answer():
    import nbformat

    for path in sorted(config.NOTEBOOKS_DIR.glob("[0-9][0-9]_*.ipynb")):
        nb = nbformat.read(path, as_version=4)
        code = "\n".join(c.source for c in nb.cells if c.cell_type == "code")
        assert "exercises.check_" in code, path.stem
        assert "raise NotImplementedError" in code, f"{path.stem}: the committed stub is not filled in"
        assert not any(f"{w} solutions" in code for w in ("import", "from")), \
            f"{path.stem}: solutions are opened deliberately, not imported"


# -- concept checks (multiple choice) ---------------------------------------------------------------

@pytest.mark.parametrize("key", exercises.CONCEPTS)
def test_a_concept_check_passes_the_right_letter_and_fails_every_other(key, capsys):
    concept, right = exercises.CONCEPTS[key], solutions.CONCEPT_ANSWERS[key]
    assert exercises.concept_check(key, right).passed
    assert exercises.concept_check(key, f" ({right.upper()}) ").passed, "as a learner may type it"
    wrong = [exercises.concept_check(key, letter) for letter in concept.letters if letter != right]
    assert len(wrong) == len(concept.letters) - 1 >= 2
    assert all(g.status == "failed" and "Hint:" in g.message for g in wrong)
    assert not any(re.search(rf"[(\"']{right}[)\"']", g.message, re.I) for g in wrong), "the right letter is never shown"
    assert len({g.message for g in wrong}) == 1, "every wrong letter gets the same words: no elimination hints"
    out = capsys.readouterr().out
    assert all(g.message in out for g in wrong)
    grade = exercises.concept_check(key, None)
    assert grade.status == "not done" and "not done yet" in capsys.readouterr().out
    assert exercises.concept_check(key, "ab").status == "failed"
    assert exercises.concept_check(key, "z").status == "failed"


def test_every_concept_check_is_asked_once_with_its_choices_and_unanswered():
    import re

    import nbformat

    assert set(exercises.CONCEPTS) == set(solutions.CONCEPT_ANSWERS)
    asked = []
    for path in sorted(config.NOTEBOOKS_DIR.glob("[0-9][0-9]_*.ipynb")):
        cells = nbformat.read(path, as_version=4).cells
        keys = []
        for i, cell in enumerate(cells):
            if cell.cell_type != "code" or not (m := re.search(r'concept_check\("(\w+)", answer\)', cell.source)):
                continue
            key = m.group(1)
            assert key.startswith(path.name[:2]), f"{path.stem} asks {key}"
            assert re.search(r"^answer = None\b", cell.source, re.M), f"{path.stem}: {key} is committed answered"
            choices = re.findall(r"^- \*\*\((\w)\)\*\*", cells[i - 1].source, re.M)
            assert "".join(choices) == exercises.CONCEPTS[key].letters, f"{path.stem}: {key}'s choices"
            keys.append(key)
        assert keys, f"{path.stem} has no concept check"
        asked += keys
    assert sorted(asked) == sorted(exercises.CONCEPTS), "each concept check asked exactly once"


def test_concept_digests_match_the_solutions_and_the_letters_are_not_in_the_grader():
    import inspect

    source = inspect.getsource(exercises)
    for key, letter in solutions.CONCEPT_ANSWERS.items():
        assert exercises.CONCEPTS[key].digest == exercises._digest(key, letter)
        assert f'"{key}": "{letter}"' not in source


# -- concept checks: no answer given away by its length or by the hint's words ------------------------

_FUNCTION_WORDS = {"the", "and", "for", "are", "its", "that", "this", "with", "from", "what", "which", "does", "not",
                   "one", "each", "than", "into"}


def _content_words(text):
    """Lower-case words of 3 or more letters, less a few function words: what a hint could echo."""
    return {w for w in re.findall(r"[a-zα-ω][\w'-]*", text.lower()) if len(w) >= 3 and w not in _FUNCTION_WORDS}


def _asked_options():
    """key -> {letter: option text}, from the markdown cell above each notebook's concept_check cell."""
    import nbformat

    asked = {}
    for path in sorted(config.NOTEBOOKS_DIR.glob("[0-9][0-9]_*.ipynb")):
        cells = nbformat.read(path, as_version=4).cells
        for i, cell in enumerate(cells):
            if cell.cell_type == "code" and (m := re.search(r'concept_check\("(\w+)", answer\)', cell.source)):
                asked[m.group(1)] = dict(re.findall(r"^- \*\*\((\w)\)\*\* (.+)$", cells[i - 1].source, re.M))
    return asked


def test_the_right_option_is_not_the_longest_and_the_hint_does_not_echo_it():
    asked = _asked_options()
    assert set(asked) == set(exercises.CONCEPTS)
    n, letters = len(asked), len(next(iter(asked.values())))
    fair = math.ceil(n / letters) + 1  # what a random letter would reach, plus one
    longest, echoed = [], []
    for key, options in asked.items():
        right = options[solutions.CONCEPT_ANSWERS[key]]
        wrong = [text for letter, text in options.items() if text is not right]
        assert len(right) <= 1.25 * max(map(len, wrong)), f"{key}: the right option is much the longest"
        if len(right) >= max(map(len, wrong)):
            longest.append(key)
        hint = _content_words(exercises.CONCEPTS[key].hint)
        shared = len(hint & _content_words(right))
        if shared and shared >= max(len(hint & _content_words(text)) for text in wrong):
            echoed.append(key)
    assert len(longest) <= fair, f"the right option is the longest in {len(longest)} of {n}: {longest}"
    assert len(echoed) <= fair, f"the hint shares most words with the right option in {len(echoed)} of {n}: {echoed}"
