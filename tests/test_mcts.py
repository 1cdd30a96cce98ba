"""The search: selection rules by hand (PUCT, UCT, the Q transforms, Gumbel's sigma and sequential halving
against mctx's numbers), exactness on tic-tac-toe against minimax, golden trees, JSON round trips, and
batched expansion on text with the real model."""

import json
import os
import random
import typing
from dataclasses import replace
from pathlib import Path

import pytest

from azlib.mcts import Child, Expansion, Tree, search, selection_terms, tree_after, visit_weights
from azlib.games import tictactoe as ttt
from azlib.mcts.tree import Node
from azlib.settings import AlphaZeroSettings, SearchSettings
from azlib.mcts.search import (Q_TRANSFORMS, RULES, puct_scores, q_by_parent_and_siblings, q_by_parent_value,
                                q_completed_by_mix_value, q_raw, sequence_of_considered_visits, uct_scores)

GOLDEN = Path(__file__).parent / "golden"


def test_selection_scores_by_hand():
    tree = Tree.with_root("r")
    tree.root.visits = 10
    a = tree.nodes[tree.add_child(0, "a", 0, 0.6, visits=4, value_sum=2.0)]
    b = tree.nodes[tree.add_child(0, "b", 1, 0.4, visits=0)]
    sqrt_n, log_n = 10**0.5, __import__("math").log(10)
    assert puct_scores([a, b], [a.q, b.q], 10, 1.5) == pytest.approx([0.5 + 1.5 * 0.6 * sqrt_n / 5, 1.5 * 0.4 * sqrt_n])
    assert uct_scores([a, b], [a.q, b.q], 10, 1.5) == [pytest.approx(0.5 + 1.5 * (log_n / 4) ** 0.5), float("inf")]


def children_with(*stats: tuple[float, int]) -> list[Node]:
    """Children with these (value_sum, visits)."""
    return [Node(state=k, parent=0, action=k, prior=0.3, depth=1, visits=n, value_sum=w)
            for k, (w, n) in enumerate(stats)]


def q_read(node: Node, children: list[Node], settings: SearchSettings, two_player: bool = False) -> list[float]:
    """Each child's Q as the search's policy for `settings` reads it at `node`."""
    return [q for q, _ in RULES[settings.rule](settings, two_player).terms(node, children)]


def test_q_transforms_by_hand():
    """Parent Q 0.5; children Q 0.9 and 0.2 (visited) and one unvisited. Both rescaled rules map the range
    [min, max] of the parent's and the visited children's Q, here [0.2, 0.9], onto [0, 1]; they differ on
    the unvisited child: "parent_value" values it at the parent, (0.5 - 0.2) / 0.7 = 3/7; "mctx"
    (qtransform_by_parent_and_siblings) at the minimum, so it reads 0."""
    tree = Tree.with_root("r")
    tree.root.visits, tree.root.value_sum = 10, 5.0  # parent Q 0.5
    kids = [tree.nodes[tree.add_child(0, k, k, 0.3, visits=v, value_sum=w)]
            for k, (v, w) in enumerate([(2, 1.8), (5, 1.0), (0, 0.0)])]  # Q 0.9, 0.2, unvisited
    assert q_read(tree.root, kids, SearchSettings()) == pytest.approx([0.9, 0.2, 0.0])
    parent_value, mctx = SearchSettings(q_transform="parent_value"), SearchSettings(q_transform="mctx")
    assert q_read(tree.root, kids, parent_value) == pytest.approx([1.0, 0.0, 0.4286], abs=1e-4)
    assert q_read(tree.root, kids, mctx) == pytest.approx([1.0, 0.0, 0.0])

    # A parent better than its children (Q 1.0) stretches the range to [0.2, 1.0]: 0.9 reads 0.7 / 0.8 = 0.875,
    # and the parent-value rule makes the unvisited child the most attractive (1.0); mctx's still reads 0.
    assert q_by_parent_value(kids, 1.0) == pytest.approx([0.875, 0.0, 1.0])
    assert q_by_parent_and_siblings(kids, 1.0) == pytest.approx([0.875, 0.0, 0.0])
    assert q_raw(children_with((1.8, 2), (1.0, 5), (0.7, 0)), 1.0) == pytest.approx([0.9, 0.2, 0.0]), \
        "an unvisited child reads 0"
    # All visited children equal and the parent too: the range is empty, and everything reads 0 (eps 1e-8).
    assert q_by_parent_and_siblings(children_with((0.3, 1), (0.6, 2)), 0.3) == [0.0, 0.0]

    # Two players: a node's value_sum is from the view of whoever moved INTO it, its children's from the view
    # of the player choosing among them; so the parent's value for the chooser is minus its Q.
    tree.root.value_sum = -5.0  # parent Q -0.5: worth +0.5 to the player choosing among the children
    assert q_read(tree.root, kids, parent_value, two_player=True) == pytest.approx([1.0, 0.0, 0.4286], abs=1e-4)
    assert q_read(tree.root, kids, mctx, two_player=True) == pytest.approx([1.0, 0.0, 0.0])


def test_completed_q_by_mix_value_by_hand():
    """Gumbel's sigma(completed Q) (mctx's qtransform_completed_by_mix_value), worked out by hand. Priors 0.4,
    0.3, 0.2, 0.1; the first three visited once with Q 0.2, 0.6, 1.0; raw value of the node 0.5.
    Mixed value for the unvisited child: (0.5 + 3 x (0.4 x 0.2 + 0.3 x 0.6 + 0.2 x 1.0) / 0.9) / 4 = 0.50833.
    Completed Q [0.2, 0.6, 1.0, 0.50833], rescaled by min 0.2 and max 1.0: [0, 0.5, 1, 0.38542];
    times (c_visit + max N) x c_scale = (50 + 1) x 0.1 = 5.1: [0, 2.55, 5.1, 1.96562]."""
    sigma = q_completed_by_mix_value([0.2, 0.6, 1.0, 0.0], [1, 1, 1, 0], [0.4, 0.3, 0.2, 0.1], 0.5)
    assert sigma == pytest.approx([0.0, 2.55, 5.1, 1.96562], abs=1e-5)
    # Nothing visited yet: every child completed with the raw value; an empty range reads 0.
    assert q_completed_by_mix_value([0.0, 0.0], [0, 0], [0.5, 0.5], 0.7) == [0.0, 0.0]


def test_sequential_halving_visits_match_mctx():
    """mctx's own expected sequences (mctx/_src/tests/seq_halving_test.py): for each simulation, the visit
    count asked of the action visited next. With m = 8 and 24 simulations: 8 actions once, the best 4 twice
    more, the best 2 for the rest."""
    assert sequence_of_considered_visits(8, 24) == (0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2,
                                                    3, 3, 4, 4, 5, 5, 6, 6)
    assert sequence_of_considered_visits(8, 47) == (0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3,
                                                    4, 4, 5, 5, 6, 6, 7, 7, 8, 8, 9, 9, 10, 10, 11, 11, 12, 12,
                                                    13, 13, 14, 14, 15, 15, 16, 16, 17)
    assert sequence_of_considered_visits(8, 2) == (0, 0)
    assert sequence_of_considered_visits(8, 13) == (0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 2)
    assert sequence_of_considered_visits(7, 24) == (0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 2, 2, 2,
                                                    3, 3, 4, 4, 5, 5, 6, 6, 7, 7, 8)
    assert sequence_of_considered_visits(1, 16) == tuple(range(16)) == sequence_of_considered_visits(0, 16)


class FourArms:
    """Single-agent: the root's four actions have priors 0.4, 0.3, 0.2, 0.1 and lead to leaves worth 0.2,
    0.6, 1.0, 0.0; the root itself is valued 0.5."""

    two_player = False
    priors, values = (0.4, 0.3, 0.2, 0.1), (0.2, 0.6, 1.0, 0.0)

    def expand(self, states, rng):
        return [Expansion([Child(k, k, p) for k, p in enumerate(self.priors)], 0.5) if s == "root"
                else Expansion([Child("end", "end", 1.0)], self.values[s]) for s in states]

    def is_terminal(self, state):
        return state == "end"

    def terminal_value(self, state):
        return 0.0


def test_gumbel_visits_each_considered_action_once_then_picks_argmax_by_hand():
    """m = 3 considered actions and a budget of 4 (the root's expansion, then one visit each). With seed 2
    the Gumbel noise is g = [3.1019, 2.9265, -1.0552, -0.9028]; g + log P = [2.186, 1.723, -2.665, -3.205],
    so actions 0, 1, 2 are considered. sigma(completed Q) = [0, 2.55, 5.1, 1.9656] (worked out in
    test_completed_q_by_mix_value_by_hand). g + log P + sigma = [2.186, 4.273, 2.435, .]: action 1, which
    is neither the prior's and noise's favourite (0) nor the best valued (2). action_weights: the improved
    policy P e^sigma / sum = [0.4, 3.842, 32.80, 0.714] / 37.76."""
    config = SearchSettings(rule="gumbel", num_simulations=4, max_considered_actions=3)
    (result,) = search(FourArms(), ["root"], config, random.Random(2))
    children = [result.tree.nodes[i] for i in result.tree.root.children]
    assert [c.info["gumbel"] for c in children] == pytest.approx([3.1019, 2.9265, -1.0552, -0.9028], abs=1e-4)
    assert [c.info["considered"] for c in children] == [True, True, True, False]
    assert [c.visits for c in children] == [1, 1, 1, 0] and result.simulations == 4
    assert result.action == 1
    assert result.action_weights == pytest.approx([0.0106, 0.1018, 0.8688, 0.0189], abs=1e-4)
    assert result.tree.root.info["raw_value"] == 0.5


def test_gumbel_wins_and_blocks_on_tictactoe():
    """Uniform priors, 32 simulations. With exact leaf values (minimax: the prior knows nothing, the values
    everything) and no noise (gumbel_scale 0, mctx's setting for evaluation), the search takes the win or the
    block; signs wrong anywhere and it would take the opposite. With random playouts, a win in one is found."""

    class Exact(ttt.TicTacToe):
        def expand(self, boards, rng):
            return [Expansion([Child(m, ttt.play(b, m), 1 / len(ttt.legal_moves(b))) for m in ttt.legal_moves(b)],
                              float(ttt.minimax(b))) for b in boards]

    must = {"XX.OO....": 2, "XX..O....": 2, "X.O.X....": 8}  # X wins at 2; O blocks at 2; O blocks at 8
    config = SearchSettings(rule="gumbel", num_simulations=32, max_depth=9, gumbel_scale=0.0)
    for board, move in must.items():
        for seed in range(3):
            (result,) = search(Exact(), [board], config, random.Random(seed))
            assert result.action == move, f"{board}: played {result.action}, must play {move}"
            assert result.simulations == 32 and sum(result.action_weights) == pytest.approx(1.0)
            assert max(range(len(result.actions)), key=result.action_weights.__getitem__) == result.actions.index(move)
    for board, wins in {"XX.OO....": {2}, "XX.OO...X": {5}}.items():  # X, then O, completes a row
        for seed in range(3):
            (result,) = search(ttt.TicTacToe(), [board], config, random.Random(seed))
            assert result.action in wins
    # With the default noise (gumbel_scale 1) the move is a sample that favours the improved policy.
    noisy = SearchSettings(rule="gumbel", num_simulations=32, max_depth=9)
    picks = [search(Exact(), ["XX..O...."], noisy, random.Random(seed))[0].action for seed in range(20)]
    assert picks.count(2) >= 16


def test_search_settings_reject_bad_values():
    bad = [dict(q_transform="min_max"), dict(rule="mcts"), dict(c=-1.0), dict(max_considered_actions=0),
           dict(gumbel_scale=-1.0), dict(value_scale=0.0), dict(maxvisit_init=-1.0),
           dict(rule="gumbel", leaves_per_step=2), dict(rule="gumbel", dirichlet_fraction=0.25)]
    for fields in bad:
        with pytest.raises(ValueError):
            SearchSettings(**fields)
    SearchSettings(rule="gumbel", max_considered_actions=1, gumbel_scale=0.0)  # the edge cases are fine


def test_the_settings_name_exactly_the_registered_rules():
    """The names a profile or --set may write (SearchSettings' Literal types, which the config checks) are the
    registries' keys, so each name reaches its function."""
    hints = typing.get_type_hints(SearchSettings)
    assert typing.get_args(hints["rule"]) == tuple(RULES)
    assert typing.get_args(hints["q_transform"]) == tuple(Q_TRANSFORMS)


class Bandit:
    """A one-step 'text' problem: three first lines with priors 0.6, 0.3, 0.1; a rollout after line k
    ends correct with probability p[k]. The policy's greedy answer takes line 0, which is mostly wrong."""

    two_player = False
    priors, p_correct = (0.6, 0.3, 0.1), (0.1, 0.9, 0.5)

    def expand(self, states, rng):
        out = []
        for state in states:
            if state != "root":  # one more rollout after the same first line
                k = int(state[4])
                out.append(Expansion([Child("more", state + "+", 1.0, {}, (float(rng.random() < self.p_correct[k]),))], 0.0))
                continue
            rollouts = [rng.choices(range(3), weights=self.priors)[0] for _ in range(2)]
            children = [Child(k, f"line{k}", self.priors[k], {},
                              tuple(float(rng.random() < self.p_correct[k]) for x in rollouts if x == k))
                        for k in range(3)]
            out.append(Expansion(children, 0.0))
        return out

    def is_terminal(self, state):
        return False

    def terminal_value(self, state):
        return 0.0


def test_search_with_rollout_values_beats_the_policys_greedy_answer():
    """AlphaZero's point on a toy: the search's answer is right more often than the policy's own greedy one,
    because rollouts' values pull the visits to the line that leads to correct answers."""
    config = SearchSettings(num_simulations=12, max_depth=50, q_transform="parent_value", c=1.0)
    greedy = Bandit.p_correct[max(range(3), key=Bandit.priors.__getitem__)]
    picks = [search(Bandit(), ["root"], config, random.Random(seed))[0] for seed in range(200)]
    search_accuracy = sum(Bandit.p_correct[max(range(3), key=lambda k: r.action_weights[k])] for r in picks) / len(picks)
    assert greedy == 0.1 and search_accuracy > 0.6


def test_gumbel_with_rollout_evaluations():
    """Text-style expansion: children arrive with rollouts already backed up. Sequential halving counts the
    simulations it sends through each root child (not the rollouts), so the budget is spent as on games."""
    config = SearchSettings(rule="gumbel", num_simulations=12, max_depth=50)
    picks = [search(Bandit(), ["root"], config, random.Random(seed))[0] for seed in range(100)]
    for r in picks:
        children = [r.tree.nodes[i] for i in r.tree.root.children]
        assert r.simulations == 12 and sum(c.info["simulations"] for c in children) == 11
        assert sum(r.action_weights) == pytest.approx(1.0)
    assert sum(Bandit.p_correct[r.action] for r in picks) / len(picks) > 0.6, "the search finds the good line"


def test_terminal_children_are_entered_once_then_skipped():
    """The fault behind the first failed training run: with skip_solved, a terminal child (solved at
    birth, zero visits) was never selected, so its value never reached the tree and it was never a leaf."""

    class OneStep:
        two_player = False

        def expand(self, states, rng):
            return [Expansion([Child("done", "done", 0.5), Child("more", "more", 0.5)], 0.0) if s == "root"
                    else Expansion([Child("x", s + "x", 1.0)], 0.0) for s in states]

        def is_terminal(self, state):
            return state == "done"

        def terminal_value(self, state):
            return 1.0

    settings = SearchSettings(num_simulations=6, max_depth=5, skip_solved=True)
    result = search(OneStep(), ["root"], settings, random.Random(0))
    tree = result[0].tree
    done = next(n for n in tree.nodes if n.state == "done")
    assert done.visits == 1 and done.value_sum == 1.0, "entered exactly once: its value is backed up"
    assert tree.nodes.index(done) in tree.leaves()


def test_visit_weights_and_temperature():
    assert visit_weights([1, 3, 0], 1.0) == [0.25, 0.75, 0.0]
    assert visit_weights([1, 3, 3], 0.0) == [0.0, 1.0, 0.0]
    w = visit_weights([1, 2], 0.5)
    assert w == pytest.approx([1 / 5, 4 / 5])


def test_minimax_ground_truth():
    assert ttt.minimax(ttt.EMPTY) == 0
    assert ttt.minimax("XX.OO....") == 1  # X to move completes the top row
    assert ttt.minimax("XX.OO...X") == 1  # O to move completes the middle row
    assert ttt.minimax("XX.O.O...") == 1 and ttt.to_move("XX.O.O...") == "X"  # X completes the top row
    assert len(ttt.reachable_positions()) == 5478


def test_mcts_keeps_a_draw_or_win_against_perfect_play():
    """At reachable positions where the player to move can force a draw or a win, the move the search
    picks keeps that guarantee. A seeded sample of 40 (the busiest ones, with 1-3 marks, among them);
    benchmarks/tictactoe.py checks all 3,888."""
    # Random playouts mislead early (600 simulations lose 4 of 3,888 positions, all with 1-3 marks);
    # 4,000 lose none. That is what "enough simulations" means for plain UCT-style MCTS here.
    env, config = ttt.TicTacToe(), SearchSettings(num_simulations=4000, max_depth=9, temperature=0, c=1.0)
    drawn_or_won = [b for b in ttt.reachable_positions() if ttt.legal_moves(b) and ttt.minimax(b) >= 0]
    early = [b for b in drawn_or_won if 1 <= 9 - b.count(".") <= 3]
    for board in random.Random(0).sample(early, 20) + random.Random(1).sample(drawn_or_won, 20):
        (result,) = search(env, [board], config, random.Random(board))
        value_after = -ttt.minimax(ttt.play(board, result.action))
        assert value_after >= 0, f"{board}: move {result.action} loses (position value {ttt.minimax(board)})"


def test_search_result_shape_and_budget():
    (result,) = search(ttt.TicTacToe(), ["X...O...."], SearchSettings(num_simulations=50, temperature=1.0),
                       random.Random(0))
    assert result.simulations == 50 and result.tree.root.visits == 50
    assert sorted(result.actions) == [1, 2, 3, 5, 6, 7, 8]
    assert sum(result.action_weights) == pytest.approx(1.0) and result.action in result.actions
    visits = [result.tree.nodes[i].visits for i in result.tree.root.children]
    assert result.action_weights == pytest.approx([v / sum(visits) for v in visits])


def golden_search():
    env = ttt.TicTacToe()
    config = SearchSettings(num_simulations=40, max_depth=9, dirichlet_fraction=0.25, temperature=1.0,
                            leaves_per_step=2)
    return search(env, ["X...O....", "XO..X...."], config, random.Random(1234), replay=True)


def test_golden_tree(tmp_path):
    """Like mctx: a seeded search on a deterministic environment reproduces a stored tree exactly."""
    trees = [r.tree.to_json() for r in golden_search()]
    path = GOLDEN / "tictactoe_trees.json"
    if os.environ.get("AZLIB_REGENERATE_GOLDEN"):
        path.write_text(json.dumps(trees, indent=1))
    assert trees == json.loads(path.read_text())
    restored = Tree.from_json(trees[0])
    restored.save(tmp_path / "t.json")
    assert Tree.load(tmp_path / "t.json").to_json() == trees[0]
    (tmp_path / "partial.json").write_text(json.dumps({"nodes": trees[0]["nodes"]}))
    with pytest.raises(ValueError, match="partial.json is not a tree .* no 'history'"):
        Tree.load(tmp_path / "partial.json")


def assert_same_tree(replayed: Tree, fresh: Tree):
    """Node for node (same indices): structure, priors, visits and values; nodes the fresh search has not made
    yet are in no children list of the replay and have no visits."""
    for i, node in enumerate(fresh.nodes):
        then = replayed.nodes[i]
        assert (then.parent, then.action, then.children, then.expanded, then.visits) == \
               (node.parent, node.action, node.children, node.expanded, node.visits), f"node {i}"
        assert then.prior == pytest.approx(node.prior) and then.value_sum == pytest.approx(node.value_sum)
    later = replayed.nodes[len(fresh.nodes):]
    assert not any(n.visits for n in later)
    assert not {c for n in replayed.nodes for c in n.children} & set(range(len(fresh.nodes), len(replayed.nodes)))


@pytest.mark.parametrize("simulations", [1, 2, 7, 60, 199])
def test_replay_at_step_k_is_the_search_run_for_k_simulations(simulations):
    """tree_after(tree, k) of a 200-simulation search equals the tree of the same seeded search stopped after k."""
    config = SearchSettings(num_simulations=200, max_depth=9, dirichlet_fraction=0.25, temperature=0)
    (long,) = search(ttt.TicTacToe(), ["X...O...."], config, random.Random(7), replay=True)
    (short,) = search(ttt.TicTacToe(), ["X...O...."], replace(config, num_simulations=simulations), random.Random(7))
    assert len(long.tree.history) == 200 and short.simulations == simulations
    assert_same_tree(tree_after(long.tree, simulations), short.tree)


def test_replay_of_rollout_evaluations_and_the_whole_history():
    """Text-style expansions back up several rollouts in one simulation; replaying all of it gives the final tree."""
    config = SearchSettings(num_simulations=12, max_depth=50, q_transform="parent_value", c=1.0)
    (long,) = search(Bandit(), ["root"], config, random.Random(3), replay=True)
    (short,) = search(Bandit(), ["root"], replace(config, num_simulations=4), random.Random(3))
    assert_same_tree(tree_after(long.tree, 4), short.tree)
    assert_same_tree(tree_after(long.tree, 12), long.tree)
    assert tree_after(long.tree, 0).root.visits == 0 and tree_after(long.tree, 0).root.children == []


def test_a_search_records_its_replay_only_when_asked():
    """Without replay the search grows the same tree (nodes, visits, values, when each node was expanded) and keeps
    no history, so there is nothing to replay; tree_after says so."""
    config = SearchSettings(num_simulations=60, max_depth=9, dirichlet_fraction=0.25, temperature=1.0)
    (plain,) = search(ttt.TicTacToe(), ["X...O...."], config, random.Random(5))
    (recorded,) = search(ttt.TicTacToe(), ["X...O...."], config, random.Random(5), replay=True)
    assert plain.tree.history == [] and len(recorded.tree.history) == plain.simulations == 60
    assert {**plain.tree.to_json(), "history": None} == {**recorded.tree.to_json(), "history": None}
    assert (plain.action, plain.action_weights) == (recorded.action, recorded.action_weights)
    assert tree_after(plain.tree, 0).root.visits == 0
    with pytest.raises(ValueError, match="recorded 0 simulations.*replay=True"):
        tree_after(plain.tree, 1)


def test_selection_terms_rank_children_as_the_search_does():
    """The scores the viewer shows are the ones the search picks by: the next simulation enters the argmax."""
    config = SearchSettings(num_simulations=30, max_depth=9, q_transform="mctx", temperature=0)
    (result,) = search(ttt.TicTacToe(), ["X...O...."], config, random.Random(0), replay=True)
    for k in range(1, 29):
        then, next_path = tree_after(result.tree, k), result.tree.history[k][0].path
        terms = selection_terms(then, 0)
        assert all(score >= q for q, score in terms)  # U >= 0
        assert then.root.children[max(range(len(terms)), key=lambda i: terms[i][1])] == next_path[1]
    assert selection_terms(Tree.with_root("r"), 0) is None, "no search settings: no scores"


class CountingEnv(ttt.TicTacToe):
    def __init__(self):
        super().__init__()
        self.batches = []

    def expand(self, boards, rng):
        self.batches.append(len(boards))
        return super().expand(boards, rng)


def test_many_roots_and_leaves_share_one_expand_call_per_step():
    env = CountingEnv()
    config = SearchSettings(num_simulations=24, leaves_per_step=4)
    results = search(env, [ttt.EMPTY, "X........", "X...O...."], config, random.Random(0))
    assert all(r.simulations == 24 for r in results)
    assert max(env.batches) > 3, "leaves of several trees must go out together"
    assert len(env.batches) < 3 * 24 / 2


def test_gumbel_searches_many_roots_in_lock_step():
    env = CountingEnv()
    config = SearchSettings(rule="gumbel", num_simulations=16, max_depth=9)
    results = search(env, [ttt.EMPTY, "X........", "X...O...."], config, random.Random(0))
    assert all(r.simulations == 16 for r in results) and max(env.batches) == 3, "one leaf per tree, all trees per call"
    for r in results:
        children = [r.tree.nodes[i] for i in r.tree.root.children]
        assert [c.visits for c in children] == [c.info["simulations"] for c in children], "games: a simulation is a visit"


class DeadEndEnv:
    two_player = False

    def expand(self, states, rng):
        return [Expansion([Child(a, state + a, 0.5) for a in "ab"] if len(state) < 2 else [], 0.1) for state in states]

    def is_terminal(self, state):
        return state.endswith("b")

    def terminal_value(self, state):
        return 1.0 if state == "ab" else 0.0


def test_solved_subtrees_are_skipped_and_search_stops_when_everything_is_solved():
    config = SearchSettings(num_simulations=100, max_depth=5, skip_solved=True)
    (result,) = search(DeadEndEnv(), [""], config, random.Random(0))
    assert result.tree.root.solved and result.simulations < 100
    by_state = {n.state: n for n in result.tree.nodes}
    assert by_state["ab"].terminal and by_state["ab"].info["terminal_value"] == 1.0
    assert by_state["aa"].terminal, "a node with nothing to expand is a dead end"


class NeedleEnv:
    """Ten first moves, each followed by `forced` forced moves "x"; only "7" then those wins. Each draw at the root
    gives `per_draw` first moves not given before, in order, with priors proportional to their number + 1 over all
    the moves given: the first draw (three moves) leaves the needle out."""

    two_player = False
    MOVES = "0123456789"

    def __init__(self, per_draw: int = 3, forced: int = 3):
        self.given, self.per_draw, self.forced = 0, per_draw, forced
        self.widened = 0

    def _root(self) -> Expansion:
        moves = self.MOVES[:self.given]
        total = sum(int(m) + 1 for m in moves)
        return Expansion([Child(m, m, (int(m) + 1) / total) for m in moves], 0.5,
                         complete=len(moves) == len(self.MOVES))

    def expand(self, states, rng):
        self.given = max(self.given, 3)
        return [self._root() if state == "" else Expansion([Child("x", state + "x", 1.0)], 0.5) for state in states]

    def widen(self, states, rng):
        assert states == [""], "only the root leaves moves out"
        self.widened += 1
        assert self.widened < 100, "drawn again and again with no simulation between"
        self.given = min(len(self.MOVES), self.given + self.per_draw)
        return [self._root()]

    def is_terminal(self, state):
        return len(state) == 1 + self.forced

    def terminal_value(self, state):
        return float(state == "7" + "x" * self.forced)


def test_without_widening_a_sampled_root_is_exhausted_and_the_search_stops_short():
    config = SearchSettings(num_simulations=50, max_depth=5, skip_solved=True, stop_at_win=True)
    (result,) = search(NeedleEnv(), [""], config, random.Random(0))
    assert [result.tree.nodes[i].action for i in result.tree.root.children] == list("012")
    assert result.tree.root.solved and result.simulations == 10, "the root, then each drawn line: nothing left"


def test_widening_draws_more_children_when_the_drawn_ones_are_exhausted_until_it_finds_the_needle():
    env = NeedleEnv()
    config = SearchSettings(num_simulations=50, max_depth=5, skip_solved=True, stop_at_win=True, widen_after=1000)
    (result,) = search(env, [""], config, random.Random(0), replay=True)
    tree = result.tree
    children = [tree.nodes[i] for i in tree.root.children]
    assert [c.action for c in children] == list("012345678"), "three draws, the last with the needle"
    assert env.widened == 2 and not tree.root.solved
    assert any(n.state == "7xxx" for n in tree.nodes), "stopped at the win"
    assert result.simulations == sum(n.expanded for n in tree.nodes) < 50, "a widening is no simulation"
    assert [c.prior for c in children] == pytest.approx([(int(c.action) + 1) / 45 for c in children])
    assert tree.root.widen_at is not None, "one move still unlisted"
    assert_same_tree(tree_after(tree, len(tree.history)), tree)
    assert [tree.nodes[i].info.get("made_at") for i in tree.root.children[::3]] == [None, 10, 19], \
        "each draw once the lines before it were searched to their ends"
    assert len(tree_after(tree, 10).root.children) == 3 and len(tree_after(tree, 11).root.children) == 6


def test_widening_by_visits_and_a_complete_node_stops_widening():
    env = NeedleEnv()
    (result,) = search(env, [""], SearchSettings(num_simulations=60, max_depth=5, widen_after=5), random.Random(0))
    root = result.tree.root
    assert len(root.children) == 10 and root.widen_at is None and env.widened == 3, "complete after four draws"
    made = [result.tree.nodes[i].info.get("made_at") for i in root.children[3::3]]
    assert made == [5, 10, 15], "a draw each time the root's visits grow by 5, before its lines are exhausted"
    with pytest.raises(ValueError, match="gumbel' does not widen"):
        SearchSettings(rule="gumbel", widen_after=4)


@pytest.mark.parametrize("simulations", [3, 5, 6, 9, 12, 20])
def test_the_replay_of_a_widened_search_is_the_search_stopped_there_priors_included(simulations):
    config = SearchSettings(num_simulations=30, max_depth=5, widen_after=5)
    (long,) = search(NeedleEnv(), [""], config, random.Random(0), replay=True)
    (short,) = search(NeedleEnv(), [""], replace(config, num_simulations=simulations), random.Random(0))
    assert_same_tree(tree_after(long.tree, simulations), short.tree)


def test_a_draw_that_finds_the_win_stops_the_search_and_the_replay_keeps_it():
    env = NeedleEnv(forced=0)
    config = SearchSettings(num_simulations=50, max_depth=5, skip_solved=True, stop_at_win=True, widen_after=1000)
    (result,) = search(env, [""], config, random.Random(0), replay=True)
    assert env.widened == 2 and result.simulations == 7, "each drawn move entered once, then the needle's draw"
    assert "7" in result.actions
    assert_same_tree(tree_after(result.tree, len(result.tree.history)), result.tree)


class Endless:
    """Every draw gives one move more, each a terminal loss: no end to the moves, none worth anything."""

    two_player = False

    def __init__(self):
        self.given = 0

    def _all(self):
        return Expansion([Child(i, f"m{i}", 1 / self.given) for i in range(self.given)], 0.0, complete=False)

    def expand(self, states, rng):
        self.given = 1
        return [self._all() for _ in states]

    def widen(self, states, rng):
        self.given += 1
        assert self.given < 100, "drawn again and again with no simulation between"
        return [self._all() for _ in states]

    def is_terminal(self, state):
        return state != ""

    def terminal_value(self, state):
        return 0.0


def test_a_node_whose_draws_bring_only_ends_draws_once_per_simulation():
    env = Endless()
    (result,) = search(env, [""], SearchSettings(num_simulations=20, max_depth=3, widen_after=3), random.Random(0))
    assert result.simulations == 20 and env.given <= 21, "a drawn terminal is entered before the node draws again"
    with pytest.raises(ValueError, match="takes dirichlet_fraction=0"):
        SearchSettings(widen_after=3, dirichlet_fraction=0.25)


def test_a_draw_that_finds_nothing_new_where_every_child_is_solved_closes_the_node():
    env = NeedleEnv(per_draw=0)
    config = SearchSettings(num_simulations=50, max_depth=5, skip_solved=True, widen_after=1000)
    (result,) = search(env, [""], config, random.Random(0))
    assert env.widened == 1 and result.tree.root.widen_at is None
    assert result.tree.root.solved and result.simulations == 10, "as without widening, after one fruitless draw"


def test_alphazero_targets_and_symmetries():
    from azlib.games import tictactoe_alphazero as az

    settings = AlphaZeroSettings(games_per_iteration=8, simulations=8, random_opening=0)
    rng = random.Random(0)
    net = az.PolicyValueNet()
    data = az.self_play(net, settings, rng)
    for board, pi, z in data:
        assert sum(pi) == pytest.approx(1.0) and all(pi[m] == 0 for m in range(9) if board[m] != ".")
        assert z in (-1.0, 0.0, 1.0)
    games = [i for i, (b, _, _) in enumerate(data) if b == ttt.EMPTY] + [len(data)]
    assert len(games) == 9
    for start, end in zip(games, games[1:]):
        zs = [z for _, _, z in data[start:end]]
        assert all(a == -b for a, b in zip(zs, zs[1:])), "z flips with the player to move"
        last_board, last_z = data[end - 1][0], zs[-1]
        if last_z == 1.0:  # the last mover won: a winning move was there
            assert any(ttt.winner(ttt.play(last_board, m)) for m in ttt.legal_moves(last_board))
        else:
            assert last_z == 0.0 and last_board.count(".") == 1, "the last mover cannot lose; else a full-board draw"
    x = az.encode(["X...O...."])
    assert x.shape == (1, 27) and x[0, :9].sum() == 1 and x[0, 9:18].sum() == 1 and x[0, 18:].sum() == 7

    assert len(set(az.SYMMETRIES)) == 8 and all(sorted(p) == list(range(9)) for p in az.SYMMETRIES)
    lines = {frozenset(line) for line in ttt.LINES}
    assert all({frozenset(p.index(k) for k in line) for line in lines} == lines for p in az.SYMMETRIES)
    pi = [0.0] * 9
    pi[2] = 1.0  # O must block the top row at square 2
    copies = az.augment([("XX..O....", pi, 0.0)])
    assert len(copies) == 8 and len({b for b, _, _ in copies}) == 8
    for board, p, z in copies:  # the target moves with the board: it still blocks
        block = p.index(1.0)
        assert board[block] == "." and ttt.minimax(ttt.play(board, block)) == 0 and z == 0.0


def test_alphazero_samples_its_first_exploratory_moves_then_plays_the_most_visited():
    """exploratory_moves = 2: a move on a board with fewer than 2 marks is sampled from the visit shares, every
    later one is the most visited (the first of them on a tie, as the search decides)."""
    import torch

    from azlib.games import tictactoe_alphazero as az

    torch.manual_seed(0)
    env = az.NetTicTacToe(az.PolicyValueNet())
    games = az.play_games([(env, env)] * 12, AlphaZeroSettings(simulations=16, exploratory_moves=2),
                          random.Random(0), noise=False)
    off_top = {True: 0, False: 0}  # moves not the most visited, while exploring and after
    for moves, end in games:
        for (board, pi), after in zip(moves, [b for b, _ in moves[1:]] + [end]):
            move = next(m for m in range(9) if board[m] != after[m])
            off_top[9 - board.count(".") < 2] += move != pi.index(max(pi))
    assert off_top[False] == 0, "after the exploratory moves, the most visited"
    assert off_top[True] >= 2, "the first two moves sampled: some are not the most visited"


def test_alphazero_random_openings():
    """Self-play games open with 0..random_opening random moves, untrained on; 0 keeps the empty board."""
    from azlib.games import tictactoe_alphazero as az

    rng = random.Random(0)
    starts = [az.random_opening(AlphaZeroSettings(random_opening=6), rng) for _ in range(700)]
    assert {9 - b.count(".") for b in starts} == set(range(7))
    assert all(ttt.legal_moves(b) and b.count("X") - b.count("O") in (0, 1) for b in starts), "no opening ends a game"
    rng, fresh = random.Random(1), random.Random(1)
    assert az.random_opening(AlphaZeroSettings(random_opening=0), rng) == ttt.EMPTY
    assert rng.random() == fresh.random(), "random_opening=0 leaves the rng as it was: the old self-play exactly"
    with pytest.raises(ValueError):
        AlphaZeroSettings(random_opening=9)

    games = 56
    data = az.self_play(az.PolicyValueNet(), AlphaZeroSettings(games_per_iteration=games, simulations=4),
                        random.Random(0))
    from_empty = sum(b == ttt.EMPTY for b, _, _ in data)
    assert 0 < from_empty < games / 3, "most games (by default) start from a random opening, not the empty board"
    assert all(z in (-1.0, 0.0, 1.0) and sum(pi) == pytest.approx(1.0) for _, pi, z in data)


def test_alphazero_grade_is_exact():
    from azlib.games import tictactoe_alphazero as az

    assert len(az.POSITIONS) == 4520 and all(ttt.legal_moves(b) for b in az.POSITIONS)
    perfect = {b: az.optimal_moves(b)[0] for b in az.POSITIONS}
    assert az.grade(perfect) == {"optimal_share": 1.0, "losing_moves": 0, "draw_as_x": 1.0, "loss_as_x": 0.0,
                                 "draw_as_o": 1.0, "loss_as_o": 0.0}
    drawn, won = "XX..O....", "XX.OO...."  # O must block at 2; X wins at 2 or lets the win go with 5
    assert ttt.minimax(drawn) == 0 and az.optimal_moves(drawn) == [2]
    assert ttt.minimax(won) == 1 and -ttt.minimax(ttt.play(won, 5)) == 0
    blunders = az.grade(perfect | {drawn: 3, won: 5})
    assert blunders["losing_moves"] == 1, "only the drawn position turned lost counts as a losing move"
    assert blunders["optimal_share"] == pytest.approx(1 - 2 / 4520)
    first_legal = az.grade({b: ttt.legal_moves(b)[0] for b in az.POSITIONS})
    assert first_legal["losing_moves"] > 100 and first_legal["optimal_share"] < 0.9
    for side in ("x", "o"):  # nobody beats perfect play: draws and losses are all there is
        assert first_legal[f"draw_as_{side}"] + first_legal[f"loss_as_{side}"] == pytest.approx(1.0)
    assert first_legal["loss_as_x"] > 0 and first_legal["loss_as_o"] > 0


def test_alphazero_grades_the_rounds_asked_for_once_per_best_net(monkeypatch):
    """grade_every = 2 over 3 rounds: graded at rounds 0, 2 and the last; a net kept by the arena is not
    graded again (the grade is most of the loop's time at the notebook's settings)."""
    from azlib.games import tictactoe_alphazero as az

    graded_nets = []
    real_evaluate = az.evaluate
    monkeypatch.setattr(az, "evaluate", lambda net, s: graded_nets.append(net) or real_evaluate(net, s))
    settings = AlphaZeroSettings(iterations=3, games_per_iteration=4, simulations=4, arena_games=0)
    _, history = az.alphazero(settings, seed=0, grade_every=2)
    assert [h["iteration"] for h in history if "optimal_share" in h] == [0, 2, 3]
    assert "optimal_share" not in history[1] and history[1]["accepted"] and history[1]["seconds"] > 0
    assert len(graded_nets) == 3, "arena_games = 0 replaces the best net every round: each graded round is new"
    keep = AlphaZeroSettings(iterations=2, games_per_iteration=4, simulations=4, arena_games=2)
    monkeypatch.setattr(az, "arena", lambda *a: {"new_wins": 0, "best_wins": 1})  # the best net is always kept
    graded_nets.clear()
    _, history = az.alphazero(keep, seed=0, grade_every=1)
    assert len(graded_nets) == 1
    assert history[0]["optimal_share"] == history[1]["optimal_share"] == history[2]["optimal_share"]
    with pytest.raises(ValueError, match="grade_every"):
        az.alphazero(keep, grade_every=0)


@pytest.mark.slow
def test_alphazero_learns():
    """A small run (4 rounds of 32 games, 16 simulations): loss falls, the grade improves."""
    from azlib.games import tictactoe_alphazero as az

    settings = AlphaZeroSettings(iterations=4, games_per_iteration=32, simulations=16, arena_games=4,
                                    batch_size=64, epochs=4)
    net, history = az.alphazero(settings, seed=0)
    first, last = history[0], history[-1]
    assert [h["iteration"] for h in history] == [0, 1, 2, 3, 4]
    assert last["policy_loss"] < history[1]["policy_loss"] - 0.2
    assert last["raw_optimal_share"] > first["raw_optimal_share"] + 0.15, "the raw policy learned the game"
    assert last["losing_moves"] < 0.7 * first["losing_moves"], "the net-guided search blunders less"
    graded = az.evaluate(net, settings)
    assert graded == {k: last[k] for k in graded}, "the loop returns the best net, graded last"
