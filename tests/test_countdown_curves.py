"""Countdown's test-time curves (azlib.games.countdown.curves): listed lines scored by the model against its own transcript
log-probabilities; the compute meter by hand; the search over listed lines; the search's stop at its first answer;
each method's first answer at the compute spent by then; the reference value learning solvability from the oracle.
Tiny or untrained nets on one CPU thread."""

from __future__ import annotations

import math
import random

import pytest
import torch

from azlib.games.countdown.arms import reference_value
from azlib.games.countdown.compute import Compute, trie_characters
from azlib.games.countdown.curves import CurveMethod, best_of_compute, curves, search_compute
from azlib.games.countdown.evaluate import value_gate
from azlib.games.countdown.play import Episode, LineSearch, search_settings
from azlib.games.countdown.policy import Policy, PolicyValueNet
from azlib.games.countdown.problems import heldout
from azlib.games.countdown.rules import MAX_MOVE_CHARS, MOVE_END, State, legal_lines, problem_text, solvable, step
from azlib.games.countdown.settings import CountdownSearchSettings, ReferenceValueSettings
from azlib.settings import GPTShape
from azlib.mcts.search import search

torch.set_num_threads(1)


def tiny_policy(seed: int = 0) -> Policy:
    torch.manual_seed(seed)
    return Policy(PolicyValueNet(GPTShape(n_layer=2, n_head=2, n_embd=32)))


STATES = [State(52, (3, 8, 11, 5)), State(20, (4, 5)), State(24, (2, 3, 4))]


def test_listed_lines_are_scored_as_the_transcript_scores_them_and_their_probabilities_sum_to_one():
    policy = tiny_policy()
    texts, listed = [problem_text(s) for s in STATES], [legal_lines(s) for s in STATES]
    scores, values = policy.score_lines(texts, listed)
    assert values == pytest.approx(policy.values(texts), abs=1e-6)
    for text, lines, got in zip(texts, listed, scores):
        assert sum(math.exp(x) for x in got) == pytest.approx(1.0, abs=1e-5)
        with torch.no_grad():
            logp, wrote, _ = policy.transcript_logprobs([text + line for line in lines],
                                                        [[False] * len(text) + [True] * len(line) for line in lines],
                                                        [[(len(text), lines)] for _ in lines])
        assert got == pytest.approx((logp * wrote).sum(1).tolist(), abs=1e-5)


def test_compute_counts_each_character_once_per_problem_and_net():
    compute = Compute()
    assert compute.charge("3 5 -> 8\n3+5=") == 13
    assert compute.charge("3 5 -> 8\n3*5=") == 3  # shares "3 5 -> 8\n3"
    assert compute.charge("3 5 -> 8\n3+5=8 (8)\n") == 6
    assert compute.charge("3 5 -> 8\n3+5=", "judge") == 13  # another net computes it again
    assert compute.charge("2 6 -> 8\n") == 9  # another problem
    assert compute.spent == {"3 5 -> 8\n": 35, "2 6 -> 8\n": 9}
    compute.answered("3 5 -> 8\n3+5=8 (8)\n")
    compute.charge("3 5 -> 8\n5+3=")
    compute.answered("3 5 -> 8\n5+3=8 (8)\n")  # only the first answer counts
    assert compute.first_answer == {"3 5 -> 8\n": 35}
    assert compute.solved_within("3 5 -> 8\n", 35) and not compute.solved_within("3 5 -> 8\n", 34)
    assert not compute.solved_within("2 6 -> 8\n", 10 ** 6)
    assert trie_characters(["3+5=", "3*5=", "5+3=", "3+5="]) == 4 + 3 + 4


def test_a_listed_expansion_has_every_legal_line_as_a_child_at_the_models_probability():
    policy = tiny_policy()
    compute = Compute()
    env = LineSearch(policy, CountdownSearchSettings(children="listed", children_by="line"), "learned",
                     compute=compute)
    state = STATES[0]
    root = Episode.start(state)
    (expansion,) = env.expand([root], random.Random(0))
    lines = legal_lines(state)
    assert [c.action for c in expansion.children] == [line.removesuffix(MOVE_END) for line in lines]
    (scores,), _ = policy.score_lines([root.text], [lines])
    assert [c.prior for c in expansion.children] == pytest.approx([math.exp(x) for x in scores], abs=1e-5)
    assert expansion.tokens == trie_characters(lines)  # scored, not generated: each character once
    assert env.tokens == expansion.tokens
    # the problem, its lines as a trie, and each child's text (each line's, then the rules') read by the value head
    assert compute.spent[root.text] == trie_characters([c.state.text for c in expansion.children])
    assert all(c.value is not None for c in expansion.children)


def test_lines_to_one_position_are_one_child_with_their_summed_prior_and_the_most_probable_line():
    """3+8= and 8+3= reach the same numbers: one child, its prior both lines' probabilities, its line the more
    probable; its lines (the target's) carry each line's own. Scoring them costs what scoring them apart does."""
    policy = tiny_policy()
    state = STATES[0]
    apart, merged = [LineSearch(policy, CountdownSearchSettings(children="listed", children_by=by), "learned",
                                compute=Compute()) for by in ("line", "position")]
    lines, by_position = [env.expand([Episode.start(state)], random.Random(0))[0].children for env in (apart, merged)]
    prior = {c.action: c.prior for c in lines}
    after = {c.action: step(state, c.action).position for c in lines}
    assert len(by_position) == len(set(after.values())) < len(lines)
    for child in by_position:
        same = [line for line, position in after.items() if position == child.state.state.position]
        assert child.prior == pytest.approx(sum(prior[line] for line in same), abs=1e-6)
        assert prior[child.action] == max(prior[line] for line in same)
        assert dict(child.info["lines"]) == pytest.approx({line: prior[line] for line in same}, abs=1e-6)
    assert sum(c.prior for c in by_position) == pytest.approx(1.0, abs=1e-5)
    assert merged.tokens == apart.tokens


def test_without_child_values_only_the_expanded_leaf_is_read():
    policy = tiny_policy()
    compute = Compute()
    settings = CountdownSearchSettings(children="listed", child_values=False)
    env = LineSearch(policy, settings, "learned", compute=compute)
    root = Episode.start(STATES[0])
    (expansion,) = env.expand([root], random.Random(0))
    assert all(c.value is None for c in expansion.children)
    assert expansion.value == pytest.approx(policy.values([root.text])[0], abs=1e-6)
    lines = legal_lines(STATES[0])
    assert compute.spent[root.text] == trie_characters([root.text + line for line in lines])


def test_a_separate_value_net_computes_what_it_reads_again():
    policy, judge = tiny_policy(0), tiny_policy(1)
    compute = Compute()
    settings = CountdownSearchSettings(children="listed", child_values=False)
    env = LineSearch(policy, settings, "learned", judge=judge, compute=compute)
    root = Episode.start(STATES[0])
    (expansion,) = env.expand([root], random.Random(0))
    assert expansion.value == pytest.approx(judge.values([root.text])[0], abs=1e-6)
    lines = legal_lines(STATES[0])
    assert compute.spent[root.text] == trie_characters([root.text + line for line in lines]) + \
        len(root.text)


def test_the_search_stops_at_its_first_answer():
    """With the oracle valuing every child as it is made, the listed search expands only solvable states (PUCT may try
    solvable siblings before going deeper) until its answer, and runs no simulation after it."""
    policy = tiny_policy()
    problems = list(heldout(4, "unseen"))[:20]
    settings = CountdownSearchSettings(children="listed")
    compute = Compute()
    env = LineSearch(policy, settings, "oracle", compute=compute)
    results = search(env, [Episode.start(p) for p in problems],
                     search_settings(settings, 50, 0.0, stop_at_win=True), random.Random(0))
    for r in results:
        expanded = [n for n in r.tree.nodes if n.expanded]
        assert r.simulations == len(expanded) < 50
        assert all(n.info["solvable"] for n in expanded if n.parent >= 0)
    assert set(compute.first_answer) == {problem_text(p) for p in problems}
    results = search(LineSearch(policy, settings, "oracle"), [Episode.start(p) for p in problems],
                     search_settings(settings, 50, 0.0), random.Random(0))
    assert all(r.simulations == 50 for r in results)


def test_best_of_k_charges_each_sample_in_the_order_drawn():
    policy = tiny_policy()
    problems = list(heldout(3, "unseen"))[:10]
    compute = best_of_compute(policy, problems, 6, seed=0)
    for problem in problems:
        key = problem_text(problem)
        assert len(key) < compute.spent[key] <= len(key) + 6 * 60
        if key in compute.first_answer:
            assert compute.first_answer[key] <= compute.spent[key]


def test_curves_solve_rates_grow_with_the_budget_and_the_oracle_search_finds_every_answer_cheaply():
    policy = tiny_policy()
    problems = list(heldout(4, "unseen"))[:12]
    settings = CountdownSearchSettings(children="listed")  # children valued as made: the oracle leads straight down
    methods = [CurveMethod(), CurveMethod("listed", "oracle"), CurveMethod("sampled", "none")]
    out = curves(policy, problems, methods, settings, samples=16, simulations=60, seed=0, budgets=(100, 300, 2000))
    oracle = out["methods"]["mcts listed puct oracle"]
    assert all(oracle["solved"]["2000"])
    assert max(oracle["first_answer"]) < 2000
    for method in out["methods"].values():
        rates = [sum(method["solved"][b]) for b in ("100", "300", "2000")]
        assert rates == sorted(rates)
        for first, spent in zip(method["first_answer"], method["spent"]):
            assert first is None or first <= spent
    # generated characters beside: listed lines are scored, never sampled; each of best-of's 16 samples plays 3 legal
    # moves of 4 ("a+b=") to MAX_MOVE_CHARS characters, every one counted, shared prefix or not
    assert oracle["generated"] == [0] * len(problems)
    assert all(16 * 3 * 4 <= g <= 16 * 3 * MAX_MOVE_CHARS for g in out["methods"]["best_of"]["generated"])
    assert all(g > 0 for g in out["methods"]["mcts sampled puct none"]["generated"])
    rows = {(r["method"], r["budget"]): r for r in out["tests"]}
    assert set(rows) == {(m.name, b) for m in methods[1:] for b in (100, 300, 2000)}
    row = rows["mcts listed puct oracle", 2000]
    assert row["rate"] == 1.0 and row["difference"] == pytest.approx(1.0 - row["best_of"])
    assert 0 <= row["p"] <= row["p_holm"] <= 1


def test_a_reference_value_without_its_net_is_refused():
    with pytest.raises(ValueError, match="reference net"):
        search_compute(tiny_policy(), list(heldout(3, "unseen"))[:2], CountdownSearchSettings(),
                       CurveMethod("listed", "reference"), 4, 0)


def test_the_reference_value_learns_solvability_from_the_oracles_labels():
    problems = list(heldout(3, "unseen"))[:100]
    untrained, _ = reference_value(GPTShape(n_layer=2, n_head=2, n_embd=32), ReferenceValueSettings(steps=0), 3, seed=0)
    trained, history = reference_value(GPTShape(n_layer=2, n_head=2, n_embd=32), ReferenceValueSettings(steps=150, batch_size=64), 3,
                                       seed=0)
    before, after = value_gate(untrained, problems, 0), value_gate(trained, problems, 0)
    assert len(history) == 150
    assert after["value_gate_auc_1"] > 0.7 > before["value_gate_auc_1"]


class FixedLines:
    """Writes the given lines, in order, at every state; values 0.5."""

    legal_only = True

    def __init__(self, lines: list[str]):
        self.fixed = lines

    def lines(self, contexts, n, temperature, generator=None, legal=None):
        from azlib.games.countdown.policy import Line
        return [[Line(t, -1.0, len(t) + 1, True) for t in self.fixed] for _ in contexts], [0.5] * len(contexts)

    def values(self, texts, contexts=None):
        return [0.5] * len(texts)


def test_sampled_lines_are_charged_in_the_order_drawn_and_the_answer_before_any_value_read():
    """The first answer is marked at the first line that solves, as best-of-k's samples are: the line after it and
    a separate net's read of the leaf come after the answer."""
    problem = State(10, (2, 5))
    text = problem_text(problem)
    compute = Compute()
    env = LineSearch(FixedLines(["2+5", "2*5", "5-2"]), CountdownSearchSettings(candidates=3), "learned",
                     judge=FixedLines([]), compute=compute)
    env.expand([Episode.start(problem)], random.Random(0))
    assert compute.first_answer[text] == len(text) + len("2+5=") + len("*5=")
    assert compute.spent[text] == len(text) + 4 + 3 + len("5-2=") + len(text)  # the judge reads the leaf again


def test_the_curves_figure_draws_each_methods_solve_rate_against_compute():
    import matplotlib
    matplotlib.use("Agg")
    from azlib.viz import plot_curves

    result = {"budgets": [100, 200], "methods": {
        "best_of": {"first_answer": [50, None, 150, 90]},
        "mcts listed puct oracle": {"first_answer": [20, 30, None, 300]},
        "mcts sampled-widened puct learned": {"first_answer": [None, 30, None, 120]}}}
    fig = plot_curves(result)
    (ax,) = fig.axes
    lines = {line.get_label(): line for line in ax.get_lines() if not line.get_label().startswith("_")}
    assert set(lines) == {"best-of-k", "MCTS, listed lines, puct, the oracle",
                          "MCTS, sampled lines widened, puct, self-play value"}
    assert len({(line.get_linestyle(), line.get_marker()) for line in lines.values()}) == 3
    x, y = lines["best-of-k"].get_data()
    assert y[list(x).index(100)] == 0.5 and y[list(x).index(200)] == 0.75
    assert lines["MCTS, listed lines, puct, the oracle"].get_linestyle() == "--"
    only = plot_curves(result, methods=["best_of"])
    assert [l.get_label() for l in only.axes[0].get_lines() if not l.get_label().startswith("_")] == ["best-of-k"]


def test_widening_samples_more_lines_where_a_draw_left_legal_lines_out_until_it_has_them_all():
    """Progressive widening over sampled lines: the root draws `candidates` more lines as its visits grow, each child's
    prior its share of every line drawn there (Sampled MuZero's beta-hat), every drawn character generated once; a
    state with every legal line drawn widens no more. Without it the root keeps its first draw."""
    policy = tiny_policy()
    state, root_text = STATES[0], problem_text(STATES[0])
    kept = LineSearch(policy, CountdownSearchSettings(), "none", torch.Generator().manual_seed(0))
    (fixed,) = search(kept, [Episode.start(state)], search_settings(CountdownSearchSettings(), 40, 0.0),
                      random.Random(0))
    assert len(kept.drawn[root_text]) == 8 and fixed.tree.root.widen_at is None
    settings = CountdownSearchSettings(widen_after=4)
    env = LineSearch(policy, settings, "oracle", torch.Generator().manual_seed(0))
    result, twin = search(env, [Episode.start(state)] * 2, search_settings(settings, 40, 0.0),
                          random.Random(0))
    tree, drawn = result.tree, env.drawn[root_text]
    children = [tree.nodes[i] for i in tree.root.children]
    assert len(drawn) > 8 and len(drawn) % 8 == 0 and len(children) > len(fixed.tree.root.children)
    assert [c.action for c in children[:len(fixed.tree.root.children)]] == fixed.actions, "the first draw kept"
    assert sum(c.info["samples"] for c in children) == len(drawn)
    assert [c.prior for c in children] == pytest.approx([c.info["samples"] / len(drawn) for c in children])
    assert env.tokens == sum(line.tokens for lines in env.drawn.values() for line in lines) == \
        result.tokens + twin.tokens, "two trees of one problem: each drawn line generated once"
    assert all(c.estimate == float(c.info["solvable"]) for c in children), "drawn children valued as they are made"
    assert {c.action + MOVE_END for c in children} < set(legal_lines(state)), "4 numbers: some lines not drawn yet"
    env = LineSearch(policy, settings, "none", torch.Generator().manual_seed(0))
    (result,) = search(env, [Episode.start(STATES[2])], search_settings(settings, 200, 0.0),
                       random.Random(0))
    root = result.tree.root
    positions = {step(STATES[2], line.removesuffix(MOVE_END)).position for line in legal_lines(STATES[2])}
    assert sorted(result.tree.nodes[i].state.state.position for i in root.children) == sorted(positions)
    assert root.widen_at is None, "3 numbers: every position drawn, the root widens no more"
