"""Countdown (azlib.games.countdown): the rules, the oracle and the solver against a brute force written here; hostile
text refused, never raised on; the problems and the shipped held-out sets; the policy's cached sampling against a
full forward; token accounting of episodes and of the search; the search with the oracle as its value; the
AlphaZero arm's visit targets; the line-draw benchmark's stochastic beam search against Gumbel-top-k. Tiny nets
on one CPU thread: the whole file runs in seconds."""

from __future__ import annotations

import random
import re
from collections import Counter
from functools import lru_cache

import pytest
import torch

from azlib.games.countdown import problems as problems_module
from azlib.games.countdown.play import Episode, LineSearch, play_episodes, play_searched, search_settings
from azlib.games.countdown.policy import Line, Policy, PolicyValueNet
from azlib.games.countdown.problems import (HELDOUT_SIZE, MAX_TARGET, MIN_TARGET, heldout, make_heldout, target_split,
                                     training_problems)
from azlib.games.countdown.rules import (MOVE_END, Move, State, apply, legal_lines, legal_moves, parse_move, reachable,
                                   solvable, solve, step)
from azlib.games.countdown.arms import Learner
from azlib.games.countdown.settings import ArmSettings, CountdownSearchSettings
from azlib.mcts.search import Child, Expansion, search
from azlib.settings import GPTShape, SearchSettings

torch.set_num_threads(1)


# -- an independent brute force: ordered pairs of positions, the four operators, Python ints ----------------------

def brute_ops(a: int, b: int) -> dict[str, int]:
    """The non-negative integer results of a op b, by operator."""
    out = {"+": a + b, "*": a * b}
    if a - b >= 0:
        out["-"] = a - b
    if b != 0 and a % b == 0:
        out["/"] = a // b
    return out


@lru_cache(maxsize=None)
def brute_reach(numbers: tuple[int, ...]) -> frozenset[int]:
    """Every final value of combining all the numbers, each once, two at a time (any order of the pair)."""
    if len(numbers) == 1:
        return frozenset(numbers)
    out: set[int] = set()
    for i in range(len(numbers)):
        for j in range(len(numbers)):
            if i == j:
                continue
            rest = [numbers[k] for k in range(len(numbers)) if k not in (i, j)]
            for value in brute_ops(numbers[i], numbers[j]).values():
                out |= brute_reach(tuple(sorted(rest + [value])))
    return frozenset(out)


def brute_solvable(target: int, numbers) -> bool:
    return target in brute_reach(tuple(sorted(numbers)))


def brute_legal(numbers) -> set[tuple[int, str, int]]:
    """(a, op, b) of every legal move on the numbers left: two different positions, a result the rules accept."""
    if len(numbers) < 2:
        return set()
    return {(numbers[i], op, numbers[j]) for i in range(len(numbers)) for j in range(len(numbers)) if i != j
            for op in brute_ops(numbers[i], numbers[j])}


def brute_after(numbers, a: int, op: str, b: int) -> Counter:
    """The multiset of numbers after a legal move."""
    return Counter(numbers) - Counter([a, b]) + Counter([brute_ops(a, b)[op]])


def state_of(text: str) -> State:
    """The state a transcript ends in, read from its text (the problem line, or the last line's parentheses)."""
    lines = text.splitlines()
    numbers, target = lines[0].split(" -> ")
    if len(lines) > 1:
        numbers = lines[-1][lines[-1].index("(") + 1:lines[-1].index(")")]
    return State(int(target), tuple(map(int, numbers.split())))


def accepted_by_hand(state: State, line: str) -> bool:
    """Whether a written line is a legal move: ASCII digits (1 to 6), one operator, ASCII digits, nothing else."""
    for k, ch in enumerate(line):
        if ch in "+-*/" and k > 0:
            a, b = line[:k], line[k + 1:]
            ok = all(1 <= len(s) <= 6 and all(c in "0123456789" for c in s) for s in (a, b))
            return ok and (int(a), ch, int(b)) in brute_legal(state.numbers)
    return False


HAND_STATES = [
    State(20, (5, 5, 10)), State(0, (5, 5, 10)), State(1, (5, 5, 10)), State(15, (5, 5, 10)), State(2, (5, 5, 10)),
    State(100, (5, 5, 10)), State(3, (5, 5, 10)), State(0, (0, 7)), State(7, (0, 7)), State(1, (0, 7)),
    State(0, (0, 0)), State(1, (0, 0)), State(6, (0, 3, 3)), State(9, (0, 3, 3)), State(1, (0, 3, 3)),
    State(11, (3, 8)), State(5, (8, 3)), State(5, (3, 8)), State(2, (4, 2)), State(2, (2, 4)), State(3, (4, 2)),
    State(52, (3, 8, 11, 5)), State(10, (2, 5, 3)), State(24, (1, 1, 1, 1)), State(5, (5,)), State(4, (5,)),
    State(0, (0, 0, 0, 0)), State(30, (1, 2, 3, 4)), State(1, (7, 7, 7, 7)), State(49, (7, 7)),
]


def random_states(count: int = 200, seed: int = 12) -> list[State]:
    rng = random.Random(seed)
    out = []
    for k in range(count):
        numbers = tuple(rng.randint(1, 30) for _ in range(rng.randint(2, 4)))
        reach = sorted(brute_reach(tuple(sorted(numbers))))
        target = rng.choice(reach) if k % 2 else rng.randint(1, 100)  # half reachable by construction
        out.append(State(target, numbers))
    return out


RULE_STATES = HAND_STATES + random_states()


def test_brute_force_sanity():
    """The brute force itself, by hand: the reference the library is checked against."""
    assert brute_reach((5, 5, 10)) >= {0, 1, 3, 20, 15, 100, 250} and not {2, 60} & brute_reach((5, 5, 10))
    assert 4 not in brute_reach((5, 5, 10)) and 1 not in brute_reach((0, 7)) and 7 in brute_reach((0, 7))
    assert brute_legal((8, 3)) == {(8, "+", 3), (3, "+", 8), (8, "*", 3), (3, "*", 8), (8, "-", 3)}
    assert brute_legal((0, 4)) == {(0, "+", 4), (4, "+", 0), (0, "*", 4), (4, "*", 0), (4, "-", 0), (0, "/", 4)}


@pytest.mark.parametrize("state", RULE_STATES, ids=lambda s: f"{s.target}<-{'_'.join(map(str, s.numbers))}")
def test_rules_and_oracle_match_brute_force(state):
    truth = brute_solvable(state.target, state.numbers)
    assert solvable(state) is truth
    assert reachable(tuple(sorted(state.numbers))) == brute_reach(tuple(sorted(state.numbers)))

    moves = legal_moves(state)
    assert len(moves) == len(set(moves))  # equal moves kept once
    assert {tuple(m) for m in moves} == brute_legal(state.numbers)
    for m in moves:  # each legal move applied: the operands removed, the result appended
        after = apply(state, m)
        assert after.target == state.target
        assert Counter(after.numbers) == brute_after(state.numbers, *m)
        assert after.numbers[-1] == brute_ops(m.a, m.b)[m.op]
    # every other move on numbers present or nearly so is refused
    near = set(state.numbers) | {0, 1, max(state.numbers) + 1}
    for a in near:
        for b in near:
            for op in "+-*/":
                if (a, op, b) not in brute_legal(state.numbers):
                    assert apply(state, Move(a, op, b)) is None, (a, op, b)

    for rng in (None, random.Random(3)):
        moves = solve(state, rng)
        if not truth:
            assert moves is None
            continue
        assert moves is not None
        now = state
        for m in moves:
            assert tuple(m) in brute_legal(now.numbers)
            now = apply(now, m)
        assert now.numbers == (state.target,) and now.solved


# -- hostile text: a loss, never an exception -------------------------------------------------------------------

SYNTAX_GARBAGE = [
    "", " ", "abc", "３+４", "٣+٤", "३+४", "³+4", "3+⁴", "🙂", "3🙂4", "3+4🙂", "8*5=41", "8*5=40", "8*5=", "=8*5",
    "+3+4", "-3+4", "3+-4", "3++4", "3+4+5", "3 + 4", " 3+4", "3+4 ", "3+4\n", "3\n+4", "\n", "3", "+", "3+",
    "+4", "0x3+4", "3.0+4", "1e2+4", "1_0+4", "3\x00+4", "(3+4)", "3÷4", "3×4", "3^4", "3%4", "3//4", "3**4",
    "1234567+1", "1+1234567", "1" * 10_000, "9" * 9_999 + "+1", "3+4" + "\u200b", "\u200b3+4", "3\u2212" + "4",
    "ｓ", "３", "None", "eval('1+1')",
]


@pytest.mark.parametrize("line", SYNTAX_GARBAGE, ids=range(len(SYNTAX_GARBAGE)))
def test_garbage_lines_are_refused(line):
    state = State(7, (3, 4, 8, 5))
    assert parse_move(line) is None
    assert step(state, line) is None


REFUSED_MOVES = [  # parsed, then refused by the rules on the state's numbers
    (State(10, (3, 8, 5)), "5+5"),  # one 5 left
    (State(10, (3, 8, 5)), "7+3"),  # 7 not there
    (State(10, (3, 8, 5)), "3-8"),  # negative
    (State(10, (3, 8, 5)), "8/3"),  # inexact
    (State(10, (8, 0, 3)), "8/0"),  # division by zero
    (State(10, (8, 0, 3)), "0/0"),
    (State(10, (8, 0, 3)), "08/3"),  # inexact, leading zero or not
    (State(5, (5,)), "5+5"),  # finished
    (State(5, (5,)), "5+0"),
]


@pytest.mark.parametrize("state, line", REFUSED_MOVES, ids=[l for _, l in REFUSED_MOVES])
def test_illegal_moves_are_refused(state, line):
    assert step(state, line) is None


def test_legal_lines_are_accepted():
    """The controls: the same parser and rules accept the lines a model should write."""
    assert parse_move("8*5") == Move(8, "*", 5)
    assert parse_move("123456-1") == Move(123456, "-", 1)
    assert step(State(10, (3, 8, 5)), "8-3") == State(10, (5, 5))
    assert step(State(10, (5, 5)), "5+5") == State(10, (10,))
    assert step(State(10, (8, 0, 3)), "0/8") == State(10, (3, 0))
    assert step(State(10, (8, 0, 3)), "8-0") == State(10, (3, 8))


def test_random_text_never_raises():
    """Fuzz: any string parses to None or to a move whose line is ASCII digits, one operator, ASCII digits."""
    rng = random.Random(0)
    alphabet = "0123456789+-*/= ()\n>x٣３⁴🙂\u200b."
    state = State(12, (3, 4, 8, 5))
    for _ in range(3000):
        line = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 16)))
        move = parse_move(line)
        assert move is None or re.fullmatch(r"[0-9]{1,6}[-+*/][0-9]{1,6}", line, flags=re.ASCII), line
        after = step(state, line)
        assert (after is not None) == accepted_by_hand(state, line), line


HOSTILE_LINES = SYNTAX_GARBAGE + ["5+5", "7+3", "3-8", "8/3", "8*5=40"]


@pytest.mark.parametrize("text", HOSTILE_LINES, ids=range(len(HOSTILE_LINES)))
def test_episode_refuses_hostile_lines(text):
    episode = Episode.start(State(10, (3, 8, 5)))
    episode.play(Line(text, -1.0, len(text) + 1, True))
    assert episode.refused and episode.over and not episode.solved
    assert episode.states == [State(10, (3, 8, 5))]


def test_episode_refuses_a_line_not_ended():
    episode = Episode.start(State(10, (3, 8, 5)))
    episode.play(Line("8-3", -1.0, 3, False))  # a legal move, but the model never wrote its end mark
    assert episode.refused and not episode.solved and len(episode.states) == 1
    # the control: the same move ended is played, then the rules write the rest
    episode = Episode.start(State(10, (3, 8, 5)))
    episode.play(Line("8-3", -1.0, 4, True))
    assert not episode.refused and episode.state == State(10, (5, 5))
    episode.play(Line("5+5", -1.0, 4, True))
    assert episode.solved and episode.text == "3 8 5 -> 10\n8-3=5 (5 5)\n5+5=10 (10)\n"


# -- problems and the shipped held-out sets ----------------------------------------------------------------------

def test_target_split():
    """Stream of Search's held-out targets: their countdown_generate.py at --seed 4 prints these."""
    seen, unseen = target_split()
    assert unseen == (14, 39, 41, 57, 62, 81, 87, 89, 96) and not set(seen) & set(unseen)
    assert sorted(seen + unseen) == list(range(10, 101)) == list(range(MIN_TARGET, MAX_TARGET + 1))


def replays_to_target(problem: State, moves) -> bool:
    """A certificate checked by hand: each move's operands are left, the result legal, the end the target alone."""
    left = Counter(problem.numbers)
    for m in moves:
        if left[m.a] < 1 or left[m.b] < 1 + (m.a == m.b) or m.op not in brute_ops(m.a, m.b):
            return False
        left = left - Counter([m.a, m.b]) + Counter([brute_ops(m.a, m.b)[m.op]])
    return left == Counter([problem.target])


@pytest.mark.parametrize("size", [3, 4])
@pytest.mark.parametrize("split", ["seen", "unseen"])
def test_shipped_heldout(size, split):
    problems = heldout(size, split)
    assert len(problems) == HELDOUT_SIZE
    targets = set(target_split()[split == "unseen"])
    for p in problems:
        assert len(p.numbers) == size and all(1 <= n <= 99 for n in p.numbers)
        assert p.target in targets
        assert replays_to_target(p, solve(p))


@pytest.mark.parametrize("split", ["seen", "unseen"])
def test_heldout_regenerates(split):
    assert tuple(make_heldout(3, split)) == heldout(3, split)


def test_training_problems_leave_heldout_out(monkeypatch):
    """The generator is made to return shipped held-out problems first: training_problems must drop them."""
    held = heldout(3, "seen")
    generate = problems_module.generate
    injected = []

    def leaky(count, size, targets, rng, *args):  # the first call returns 3 held-out problems among its own
        planted = [] if injected else list(held[:min(3, count)])
        injected.extend(planted)
        return planted + generate(count - len(planted), size, targets, rng, *args)

    monkeypatch.setattr(problems_module, "generate", leaky)
    out = training_problems(20, 3, seed=5)
    assert injected and len(out) == 20
    assert not set(out) & set(held)
    assert all(p.target in target_split()[0] for p in out)


def test_training_problems_leave_heldout_out_in_any_order():
    held = {(p.target, tuple(sorted(p.numbers))) for p in heldout(3, "seen")}
    leaked = [p for p in training_problems(60, 3, seed=2) if (p.target, tuple(sorted(p.numbers))) in held]
    assert leaked == []


# -- the policy: cached sampling against a full forward -----------------------------------------------------------

def tiny_policy(seed: int = 0, legal_only: bool = False) -> Policy:
    torch.manual_seed(seed)
    return Policy(PolicyValueNet(GPTShape(n_layer=1, n_head=2, n_embd=16)), legal_only=legal_only)


CONTEXTS = ["3 8 11 5 -> 52\n", "2 5 3 -> 10\n", "3 8 11 5 -> 52\n8*5=40 (3 11 40)\n", "7 7 -> 49\n"]


def full_forward_logprob(policy: Policy, context: str, line: Line) -> float:
    text = context + line.text + ("=" if line.ended else "")
    logp, mask, _ = policy.transcript_logprobs([text], [[False] * len(context) + [True] * (len(text) - len(context))])
    assert int(mask.sum()) == line.tokens == len(text) - len(context)
    return float((logp * mask).sum().detach())


@pytest.mark.parametrize("temperature", [1.0, 0.5])
def test_cached_sampling_equals_full_forward(temperature):
    """Each sampled line's log-probability is its full forward's, each context's value its own; a context given
    twice (prefilled once) still gives each of its rows lines of its own."""
    policy = tiny_policy()
    contexts = [*CONTEXTS, CONTEXTS[2]]
    lines, values = policy.lines(contexts, 6, temperature, torch.Generator().manual_seed(1))
    assert [len(g) for g in lines] == [6] * len(contexts)
    every = [line for group in lines for line in group]
    assert any(l.ended for l in every) and any(not l.ended for l in every)  # both kinds exercised
    for context, group in zip(contexts, lines):
        for line in group:
            assert "=" not in line.text
            assert line.logprob == pytest.approx(full_forward_logprob(policy, context, line), abs=1e-4)
    assert lines[2] != lines[-1] and values[2] == values[-1]
    assert policy.values(contexts) == pytest.approx(values, abs=1e-5)
    # the left padding changes nothing: each context alone has the value it has in the batch
    assert [policy.values([c])[0] for c in contexts] == pytest.approx(values, abs=1e-5)


def test_greedy_lines_equal_for_every_n():
    policy = tiny_policy(seed=3)
    first, _ = policy.lines(CONTEXTS, 1, 0.0)
    for n in (2, 5):
        lines, _ = policy.lines(CONTEXTS, n, 0.0)
        assert lines == [group * n for group in first]
    for context, group in zip(CONTEXTS, first):  # and the same alone as in the batch, scored as a full forward
        alone, _ = policy.lines([context], 1, 0.0)
        assert alone[0][0].text == group[0].text and alone[0][0].ended == group[0].ended
        assert group[0].logprob == pytest.approx(full_forward_logprob(policy, context, group[0]), abs=1e-4)


def test_legal_only_samples_only_legal_lines_from_the_models_renormalised_distribution():
    policy = tiny_policy(seed=4, legal_only=True)
    states = [state_of(c) for c in CONTEXTS]
    legal = [[f"{a}{op}{b}=" for a, op, b in brute_legal(s.numbers)] for s in states]
    lines, _ = policy.lines(CONTEXTS, 32, 1.0, torch.Generator().manual_seed(2), legal)
    for group, allowed in zip(lines, legal):
        assert all(l.ended and l.text + "=" in allowed for l in group)
        assert len({l.text for l in group}) > 1
    # the masked log-probability of a line is at least its unmasked one (mass only moves onto legal characters), and
    # the update scores it under the same mask as it was sampled
    for context, group, allowed in zip(CONTEXTS, lines, legal):
        for line in group:
            assert line.logprob >= full_forward_logprob(policy, context, line) - 1e-5
            text = context + line.text + "="
            written = [False] * len(context) + [True] * (len(line.text) + 1)
            logp, mask, _ = policy.transcript_logprobs([text], [written], [[(len(context), allowed)]])
            assert float((logp * mask).sum().detach()) == pytest.approx(line.logprob, abs=1e-4)
    # without the mask the same random net almost never writes a legal line
    free, _ = policy.lines(CONTEXTS, 32, 1.0, torch.Generator().manual_seed(2))
    assert sum(l.ended and l.text + "=" in allowed for g, allowed in zip(free, legal) for l in g) < 8


# -- token accounting ---------------------------------------------------------------------------------------------

class MixedPolicy(Policy):
    """A tiny random net whose every other sampled line is replaced by a legal move of the context's state (found by
    the brute force), so that episodes and searches go deeper than a random net's first refused line."""

    def __init__(self, seed: int = 0):
        super().__init__(tiny_policy(seed).net, legal_only=False)
        self.rng = random.Random(seed)

    def lines(self, contexts, n, temperature, generator=None, legal=None):
        drawn, values = super().lines(contexts, n, temperature, generator, legal)
        out = []
        for context, group in zip(contexts, drawn):
            group = list(group)
            legal = sorted(brute_legal(state_of(context).numbers))
            for i in range(0, len(group), 2):
                if legal:
                    a, op, b = self.rng.choice(legal)
                    group[i] = Line(f"{a}{op}{b}", -1.0, len(f"{a}{op}{b}") + 1, True)
            out.append(group)
        return out, values


def counted(policy: Policy) -> list[tuple[list[str], list[list[Line]]]]:
    """Every `lines` call's contexts and what it returned, recorded on the instance."""
    calls = []
    inner = policy.lines

    def lines(contexts, n, temperature, generator=None, legal=None):
        drawn, values = inner(contexts, n, temperature, generator, legal)
        calls.append((list(contexts), drawn))
        return drawn, values

    policy.lines = lines
    return calls


@pytest.mark.parametrize("make", [tiny_policy, MixedPolicy], ids=["random", "mixed"])
def test_episode_tokens_are_written_characters(make):
    policy = make()
    calls = counted(policy)
    problems = list(heldout(3, "seen")[:4])
    episodes = play_episodes(policy, problems, 3, 1.0, torch.Generator().manual_seed(0))
    flat = [e for g in episodes for e in g]
    assert all(e.over for e in flat)
    for e in flat:
        assert e.tokens == sum(e.written) > 0
        assert len(e.written) == len(e.text)
    assert sum(e.tokens for e in flat) == sum(l.tokens for _, drawn in calls for g in drawn for l in g)
    if make is MixedPolicy:
        assert max(len(e.states) for e in flat) == 3  # some episode played to its end


def test_search_tokens_count_each_expansion_once():
    policy = MixedPolicy(seed=1)
    calls = counted(policy)
    settings = CountdownSearchSettings(candidates=4, simulations=6)
    games, tokens, _ = play_searched(policy, list(heldout(3, "seen")[:3]), settings, "learned", random.Random(0),
                                  explore=True, generator=torch.Generator().manual_seed(0))
    contexts = [c for cs, _ in calls for c in cs]
    assert len(contexts) == len(set(contexts))  # no state sampled twice
    assert tokens == sum(l.tokens for _, drawn in calls for g in drawn for l in g) > 0
    assert sum(len(g.moves) for g in games) > len(games)  # later searches started in expanded subtrees


# -- the search with the oracle as its value ------------------------------------------------------------------------

ROOT = State(10, (2, 5, 3))
LIVE, DEAD = "5+3", "2*5"  # 5+3 leaves 2 8 (2+8 = 10); 2*5 leaves 3 10, from which 10 is out of reach


class StubPolicy:
    """Fixed lines: at the root the two moves once each (equal priors) in the order given; elsewhere every legal
    move once. Values 0.5."""

    legal_only = False

    def __init__(self, root_lines: list[str]):
        self.root_lines = root_lines

    def lines(self, contexts, n, temperature, generator=None, legal=None):
        out = []
        for context in contexts:
            state = state_of(context)
            texts = self.root_lines if state == ROOT else sorted(f"{a}{op}{b}" for a, op, b in
                                                                 brute_legal(state.numbers))
            out.append([Line(t, -1.0, len(t) + 1, True) for t in texts])
        return out, [0.5] * len(contexts)


def test_stub_state_has_one_live_and_one_dead_move():
    assert brute_solvable(ROOT.target, ROOT.numbers)
    assert brute_solvable(ROOT.target, list(brute_after(ROOT.numbers, 5, "+", 3).elements()))
    assert not brute_solvable(ROOT.target, list(brute_after(ROOT.numbers, 2, "*", 5).elements()))


def oracle_search(root_lines: list[str], simulations: int):
    settings = CountdownSearchSettings(candidates=2, simulations=simulations)
    env = LineSearch(StubPolicy(root_lines), settings, "oracle")
    [result] = search(env, [Episode.start(ROOT)], search_settings(settings, simulations, 0.0),
                      random.Random(0))
    return [result.tree.nodes[i] for i in result.tree.root.children]


def is_live(node) -> bool:
    """A child known by its state (not by its action): can its numbers still reach the target (brute force)?"""
    target, numbers = node.state.state
    return brute_solvable(target, numbers)


@pytest.mark.parametrize("order", [
    [LIVE, DEAD],
    [DEAD, LIVE],
], ids=["live_first", "dead_first"])
def test_oracle_search_expands_the_live_child_first(order):
    children = oracle_search(order, 2)
    assert len(children) == 2 and sum(map(is_live, children)) == 1
    assert [c.prior for c in children] == [0.5, 0.5]
    assert [list(c.state.state.numbers) for c in children] == [[2, 8] if line == LIVE else [3, 10] for line in order]
    first = min((c for c in children if c.expanded_at >= 0), key=lambda c: c.expanded_at)
    assert is_live(first)


@pytest.mark.parametrize("order", [[LIVE, DEAD], [DEAD, LIVE]], ids=["live_first", "dead_first"])
def test_oracle_search_visits_the_live_child_most(order):
    children = oracle_search(order, 8)
    live = next(c for c in children if is_live(c))
    dead = next(c for c in children if not is_live(c))
    assert live.visits > dead.visits
    assert live.info["solvable"] and not dead.info["solvable"]


def test_search_children_are_named_by_their_line():
    children = oracle_search([LIVE, DEAD], 2)
    assert [c.action for c in children] == [LIVE, DEAD]
    assert [c.info["line"] for c in children] == [LIVE, DEAD]


class ListedMoves:
    """Countdown with every legal move a child at equal priors, each child valued by the exact oracle as it is made:
    its first Q (`Child.value`), or, `as_visits`, a visit of its own backed up when it is made (a child's evaluation
    counted as a simulation through it)."""

    two_player = False

    def __init__(self, as_visits: bool = False):
        self.as_visits = as_visits

    def is_terminal(self, state: State) -> bool:
        return state.finished

    def terminal_value(self, state: State) -> float:
        return float(state.solved)

    def expand(self, states, rng):
        out = []
        for state in states:
            moves = legal_moves(state)
            children = []
            for move in moves:
                after = apply(state, move)
                value = float(brute_solvable(after.target, list(after.numbers)))
                children.append(Child(str(move), after, 1 / len(moves), evaluations=(value,)) if self.as_visits
                                else Child(str(move), after, 1 / len(moves), value=value))
            out.append(Expansion(children, float(brute_solvable(state.target, list(state.numbers)))))
        return out


def target_mass_on_solvable(rule: str, as_visits: bool = False) -> list[float]:
    """For 40 unseen-target 4-number problems, 32 simulations: the share of the search's target (its
    action_weights) on first moves that keep the problem solvable."""
    settings = SearchSettings(num_simulations=32, max_depth=16, rule=rule, temperature=1.0)
    results = search(ListedMoves(as_visits), list(heldout(4, "unseen")[:40]), settings, random.Random(0))
    return [sum(w for w, i in zip(r.action_weights, r.tree.root.children)
                if brute_solvable(r.tree.nodes[i].state.target, list(r.tree.nodes[i].state.numbers)))
            for r in results]


def test_the_targets_mass_is_on_solvable_first_moves_with_the_oracle_as_value():
    """One backup per simulation, a child's value its first Q: PUCT's visit shares put at least 0.75 of the target
    on solvable first moves at every problem, Gumbel's improved policy 0.9 on average (a problem with one solvable
    move among about 30 gets e^sigma / (e^sigma + 29) at most, sigma = (50 + max N) x 0.1: about 0.88 here). A
    child's value counted as a visit when it is made spreads the visits over every child: PUCT's target then sits
    near the share of solvable moves."""
    puct, gumbel = target_mass_on_solvable("puct"), target_mass_on_solvable("gumbel")
    assert min(puct) >= 0.75
    assert sum(gumbel) / len(gumbel) >= 0.9 and min(gumbel) >= 0.85
    as_visits = target_mass_on_solvable("puct", as_visits=True)
    assert sum(as_visits) / len(as_visits) < 0.5


def test_the_target_does_not_depend_on_the_move_temperature():
    """The same search at temperature 0 and 1 (one seed): the action weights, the policy target, are the same
    visit shares; only the move differs in how it is drawn."""
    problems = list(heldout(4, "unseen")[:5])
    weights = {t: [r.action_weights for r in search(ListedMoves(), problems, SearchSettings(
        num_simulations=32, max_depth=16, c=4.0, temperature=t), random.Random(0))] for t in (0.0, 1.0)}
    assert weights[0.0] == weights[1.0]
    assert any(0 < w < max(ws) for ws in weights[0.0] for w in ws), "shares, not one move"


# -- the AlphaZero arm's visit targets -------------------------------------------------------------------------------

def searched_games(explore: bool, seed: int = 2, candidates: int = 4, simulations: int = 6):
    """Games of play_searched over a few 3-number problems, and what each state's `lines` call returned."""
    policy = MixedPolicy(seed=seed)
    calls = counted(policy)
    settings = CountdownSearchSettings(candidates=candidates, simulations=simulations)
    games, _, _ = play_searched(policy, list(heldout(3, "unseen")[:3]), settings, "learned", random.Random(1),
                             explore=explore, generator=torch.Generator().manual_seed(seed))
    return policy, games, {c: g for cs, drawn in calls for c, g in zip(cs, drawn)}


@pytest.mark.parametrize("explore", [True, False])
def test_searched_targets(explore):
    _, games, returned = searched_games(explore)
    moves = [m for g in games for m in g.moves]
    assert any(len(m.lines) > 1 for m in moves)
    refused_seen = False
    for m in moves:
        state = state_of(m.text)
        lines = list(m.lines)
        sampled = {l.text for l in returned[m.text] if l.ended and accepted_by_hand(state, l.text)}
        refused_seen |= any(not (l.ended and accepted_by_hand(state, l.text)) for l in returned[m.text])
        assert len(lines) == len(set(lines)) == len(m.targets)
        assert set(lines) == sampled  # every accepted line, and no refused one
        if lines:
            assert sum(m.targets) == pytest.approx(1.0, abs=1e-9)
            assert all(t >= 0 for t in m.targets)
        if not explore and m.played in m.lines:  # the most visited line has the largest share
            assert m.targets[m.lines.index(m.played)] == max(m.targets)
    assert refused_seen


def test_subtree_labels_are_exact_where_the_search_listed_every_line():
    """The stub writes every legal line below the root, so subtrees are searched to their ends: a state labelled 1
    has a solution (brute force), one labelled 0 has none, the dead child (every legal line from it ended unsolved)
    among them; the root is left out (its label is the game's outcome)."""
    from azlib.games.countdown.play import subtree_labels

    settings = CountdownSearchSettings(candidates=2, simulations=12)
    env = LineSearch(StubPolicy([LIVE, DEAD]), settings, "oracle")
    [result] = search(env, [Episode.start(ROOT)], search_settings(settings, 12, 0.0), random.Random(0))
    labels = subtree_labels(result.tree)
    for text, label in labels.items():
        state = state_of(text)
        assert label == float(brute_solvable(state.target, list(state.numbers))), text
    assert Episode.start(ROOT).text not in labels
    assert 0.0 in labels.values() and 1.0 in labels.values()


class FixedLines(StubPolicy):
    """Without the legal mask: at each state the lines `by_state` gives it (the rules refuse some)."""

    def __init__(self, by_state: dict[State, list[str]]):
        self.by_state = by_state

    def lines(self, contexts, n, temperature, generator=None, legal=None):
        return [[Line(t, -1.0, len(t) + 1, True) for t in self.by_state[state_of(c)]] for c in contexts], \
            [0.5] * len(contexts)


def test_subtree_labels_count_a_state_exhausted_only_when_every_position_after_it_was_searched():
    """Without the legal mask, lines are compared with the legal ones by where they lead, never counted: below the
    root, (4, 3) has 5 legal lines reaching 3 positions (7, 1 and 12). Target 12: 3 legal lines drawn (2
    positions, all ending unsolved) and 2 the rules refuse, as many children as positions: solvable (3*4), so no
    label. Target 13: every position reached, none is 13: dead by its subtree. 03*4 is no legal line's text but
    reaches 3*4's position: with 3+4 and 4-3 it reaches every position, dead at target 13 too."""
    from azlib.games.countdown.play import subtree_labels

    settings = CountdownSearchSettings(candidates=8, simulations=8)
    cases = [(12, ["3+4", "4+3", "4-3", "3-4", "4/3"], None, 4),  # 2 positions of 3, 2 refused lines
             (13, ["3+4", "4+3", "4-3", "3*4", "4*3", "3-4"], 0.0, 4),  # 3 positions, 1 refused line
             (13, ["3+4", "4-3", "03*4"], 0.0, 3)]
    for target, lines, label, children in cases:
        root, below = State(target, (1, 3, 4)), State(target, (4, 3))
        assert len(legal_lines(below)) == 5 and solvable(below) == (label is None)
        env = LineSearch(FixedLines({root: ["1*3"], below: lines}), settings, "none")
        [result] = search(env, [Episode.start(root)], search_settings(settings, 8, 0.0), random.Random(0))
        [child] = [result.tree.nodes[c] for c in result.tree.root.children]
        assert child.expanded and len(child.children) == children
        assert subtree_labels(result.tree).get(child.state.text) == label


def test_a_childs_share_is_spread_over_its_lines_by_their_priors_and_evenly_where_they_underflow():
    from azlib.games.countdown.play import shares

    assert shares([("3+4", 0.3), ("4+3", 0.1)]) == pytest.approx([0.75, 0.25])
    assert shares([("3+4", 0.0), ("4+3", 0.0)]) == [0.5, 0.5]  # a float32 softmax far below the best line


def test_a_position_no_line_can_write_is_never_reached():
    """A legal move on a 7-digit number has no line the rules accept (at most 6 digits): its position is never
    reached, and asking does not fail."""
    from azlib.games.countdown.play import every_position_reached

    state = State(5, (1234567, 2))
    assert all(step(state, line.removesuffix(MOVE_END)) is None for line in legal_lines(state))
    assert not every_position_reached(state, [])


def test_the_sampled_prior_asks_for_lines_sampled_at_temperature_1():
    """A line's share of the samples estimates its probability only where the lines are drawn from the policy
    itself; at another temperature the prior must be the policy's."""
    with pytest.raises(ValueError, match="temperature 1"):
        CountdownSearchSettings(temperature=0.5)
    assert CountdownSearchSettings(temperature=0.5, prior="policy").temperature == 0.5
    assert CountdownSearchSettings(temperature=0.5, children="listed").children == "listed"


def test_searched_games_carry_each_states_subtree_label_once():
    """play_searched's moves carry their searches' labels, each exact (brute force), each state once a game: with
    2 sampled lines a node, a state whose every searched line ended unsolved is labelled only where those were all
    its legal lines."""
    _, games, _ = searched_games(explore=True, candidates=16, simulations=12)
    labelled = [text for g in games for m in g.moves for text, _ in m.labels]
    assert labelled and len(labelled) == len(set(labelled))
    for g in games:
        for m in g.moves:
            for text, label in m.labels:
                state = state_of(text)
                assert label == float(brute_solvable(state.target, list(state.numbers))), text


def test_alphazero_update_reads_searched_moves():
    policy, games, _ = searched_games(explore=True, candidates=16, simulations=12)
    moves = [m for g in games for m in g.moves]
    assert any(m.labels for m in moves), "the value's rows include the searches' labels"
    assert all(isinstance(l, str) for m in moves for l in m.lines) and all(isinstance(m.played, str) for m in moves)
    outcomes = [float(g.solved) for g in games for _ in g.moves]
    logs = Learner(policy, ArmSettings(batch_size=8)).alphazero(moves, outcomes, random.Random(0))
    assert logs["policy_loss"] == logs["policy_loss"]  # a number, not nan: some line carried a share


def test_the_value_is_judged_on_states_after_the_first_move_each_once():
    from azlib.games.countdown.evaluate import value_quality

    policy = tiny_policy(seed=5, legal_only=True)
    problems = list(heldout(3, "unseen")[:6])
    episodes = [e for g in play_episodes(policy, problems, 4, 1.0, torch.Generator().manual_seed(0)) for e in g]
    middle = {e.text[:end + 1] for e in episodes for end, s in zip(e.state_ends[1:], e.states[1:]) if not s.finished}
    quality = value_quality(episodes)
    assert quality["value_states"] == len(middle) > 0
    for e in episodes:  # the value each state was played from with: the value head's reading of its text
        played_from = [e.text[:end + 1] for end in e.state_ends[:len(e.values)]]
        assert len(e.values) == len(played_from) > 0
        assert e.values == pytest.approx(policy.values(played_from), abs=1e-5)
        e.values = [float(solvable(state)) for state in e.states[:len(e.values)]]  # a value that is the oracle
    assert value_quality(episodes)["value_auc"] == value_quality(episodes)["value_precision"] == 1.0
    with pytest.raises(ValueError, match="play_episodes recorded"):
        value_quality([Episode.start(problems[0])])
    truth = [solvable(state_of(t)) for t in middle]
    assert quality["value_base_rate"] == pytest.approx(sum(truth) / len(truth))


def test_values_after_shared_contexts_are_the_values_of_the_whole_texts():
    """A search's children read their parent's cached keys: each child's value as if its whole text were read."""
    policy = tiny_policy(seed=3, legal_only=True)
    parents = [Episode.start(p) for p in heldout(4, "unseen")[:3]]
    texts, contexts = [], []
    for parent in parents:
        for line in legal_lines(parent.state)[:7]:
            child = parent.copy()
            child.play(Line(line.removesuffix(MOVE_END), 0.0, len(line), True))
            texts.append(child.text)
            contexts.append(parent.text)
    order = list(range(len(texts)))
    random.Random(0).shuffle(order)  # children of one parent need not be next to each other
    texts, contexts = [texts[i] for i in order], [contexts[i] for i in order]
    assert policy.values(texts, contexts) == pytest.approx(policy.values(texts), abs=1e-5)
    for context in (texts[0], ""):
        with pytest.raises(ValueError, match="not a shorter, non-empty prefix"):
            policy.values(texts[:1], [context])


def test_ranking_quality_by_hand():
    """Values 0.9 0.8 0.4 (solvable) and 0.7 0.4 0.1 (dead): of the 9 pairs a solvable state outranks a dead one in
    7, ties in 1 (0.4, 0.4): AUC 7.5 / 9. The median solvable value, 0.8, calls 0.9 and 0.8 solvable and no dead
    state: precision 1 at recall 0.5; values that put a dead state on top lower it."""
    from azlib.games.countdown.evaluate import ranking_quality

    truth = [True, True, True, False, False, False]
    quality = ranking_quality([0.9, 0.8, 0.4, 0.7, 0.4, 0.1], truth)
    assert quality["auc"] == pytest.approx(7.5 / 9) and quality["precision_at_half_recall"] == 1.0
    assert ranking_quality([0.9, 0.8, 0.4, 0.95, 0.4, 0.1], truth)["precision_at_half_recall"] == pytest.approx(2 / 3)


def test_the_value_gate_judges_states_random_moves_reach_against_the_oracle():
    """A value that is the oracle passes the gate (AUC 1, precision 1); its complement fails it (AUC 0); the states
    are unfinished ones after 1 and after 2 moves of 4-number problems, each once."""
    from azlib.games.countdown.evaluate import value_gate

    class OracleValue:
        def __init__(self, sign):
            self.sign = sign

        def values(self, texts):
            return [self.sign * float(brute_solvable(state.target, list(state.numbers)))
                    for state in map(state_of, texts)]

    problems = list(heldout(4, "unseen")[:30])
    gate = value_gate(OracleValue(1), problems, seed=0)
    assert gate["value_gate_auc_1"] == gate["value_gate_auc_2"] == 1.0
    assert gate["value_gate_precision_1"] == gate["value_gate_precision_2"] == 1.0
    assert 0 < gate["value_gate_base_rate_1"] < 1 and 30 < gate["value_gate_states_1"] <= 120
    assert value_gate(OracleValue(-1), problems, seed=0)["value_gate_auc_1"] == 0.0


def test_arms_at_matched_optimiser_steps_by_hand():
    """Per seed the budget is the fewest steps any arm took in all; every arm is read at its last iteration within
    it (the arm that took the fewest at its end), and an arm whose first iteration already overshoots is refused."""
    from azlib.games.countdown.experiment import matched_steps

    def rows(steps, rates):
        return [{"optimizer_steps": s, "greedy_unseen": r} for s, r in zip(steps, rates)]

    histories = {"rft": [rows([70, 70, 70, 70], [0.1, 0.2, 0.3, 0.4]), rows([60, 60, 60, 60], [0.5, 0.6, 0.7, 0.8])],
                 "alphazero": [rows([50, 50, 50, 50], [0.9, 0.8, 0.7, 0.6]), rows([40, 40, 50, 50], [0.1, 0.2, 0.3, 0.35])]}
    matched = matched_steps(histories)
    assert matched["budget"] == [200, 180]
    assert matched["steps"] == {"rft": [140, 180], "alphazero": [200, 180]}
    assert matched["greedy_unseen"] == {"rft": [0.2, 0.7], "alphazero": [0.6, 0.35]}
    with pytest.raises(ValueError, match="first iteration"):
        matched_steps({"rft": [rows([300], [0.1])], "alphazero": [rows([50], [0.2])]})


def test_greedy_moves_says_at_which_move_the_greedy_policy_loses():
    from azlib.games.countdown.evaluate import greedy_moves
    from azlib.games.countdown.play import play_greedy

    policy = tiny_policy(legal_only=True)
    out = greedy_moves(policy, play_greedy(policy, list(heldout(3, "unseen"))[:40]))
    # every problem starts solvable, so a game is won exactly when each of its two moves kept it so
    assert out["greedy"] == pytest.approx(out["kept_1"] * out["kept_2"])
    assert 0 < out["uniform_keeps_1"] < 1 and 0 <= out["policy_mass_keeps_1"] <= 1


# -- the stochastic beam search of benchmarks/countdown_line_draws.py ------------------------------------------------

def test_stochastic_beam_search_draws_lines_as_gumbel_top_k():
    """Kool et al. 2019: a beam over characters draws the same sets as Gumbel-top-k over whole lines (K lines
    without replacement, each draw's order by perturbed log-probability). Lines sharing prefixes, drawn 3,000
    times each way: every ordered pair's frequency within 0.03 (about 4 standard errors) of the direct draw's."""
    import importlib.util
    from azlib.paths import REPO_ROOT

    spec = importlib.util.spec_from_file_location("line_draws", REPO_ROOT / "benchmarks" / "countdown_line_draws.py")
    line_draws = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(line_draws)
    lines = ["1+2=", "1+3=", "1*3=", "2+3=", "2*3="]
    probs = [0.4, 0.25, 0.05, 0.2, 0.1]
    logprobs = [float(torch.tensor(p).log()) for p in probs]
    draws = 3000
    rng = random.Random(0)
    beam = Counter()
    for _ in range(draws):
        drawn, computed = line_draws.stochastic_beam_search(lines, logprobs, 2, rng)
        assert len(set(drawn)) == 2 and set(drawn) <= set(lines), "two distinct legal lines"
        assert computed <= 2 * 4 + 1, "at most K prefixes a character, each once"
        beam[tuple(drawn)] += 1
    direct = Counter()
    for _ in range(draws):
        perturbed = sorted(((lp + line_draws.gumbel(rng), line) for line, lp in zip(lines, logprobs)), reverse=True)
        direct[tuple(line for _, line in perturbed[:2])] += 1
    assert direct[("1+2=", "1+3=")] > 0.1 * draws, "the direct draw orders the two likeliest lines first often"
    for pair in set(beam) | set(direct):
        assert abs(beam[pair] - direct[pair]) / draws < 0.03, pair
    singles = Counter(line for pair in beam.elements() for line in pair)
    assert singles["1+2="] / draws > 0.6 > singles["1*3="] / draws, "the likelier line is drawn more often"
