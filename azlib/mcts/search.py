"""One Monte Carlo tree search for games and for text: select (PUCT or UCT), expand a batch of
leaves with ONE environment call, back up. Pure function of environment, roots, config and rng.

The shape follows mctx: `search(env, roots, config, rng) -> [SearchResult(action, action_weights,
tree)]`. Many roots (problems) are searched in lock-step, and each step may take several leaves per
tree (virtual loss), so a text environment turns a whole step into one batched generate call.
"""

from __future__ import annotations

import math
import random
import time
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple, Protocol, Sequence

from azlib.mcts.tree import Tree


@dataclass(frozen=True)
class SearchConfig:
    """Budgets and the selection rule. Defaults follow the original system (60 iterations, depth 12,
    c = 1.414); `NUM_MCTS_ITERATIONS`, `MAX_TREE_DEPTH`, `MAX_TOKENS` reach these through azlib.config."""

    num_simulations: int = 60  # leaf evaluations per root
    max_depth: int = 12  # a node this deep is terminal
    rule: Literal["puct", "uct"] = "puct"
    c: float = 1.414  # exploration constant of either rule
    # How PUCT reads Q. "raw": the mean backed-up value, 0 for an unvisited child (AlphaZero on games
    # with values in [-1, 1]; the seed). "min_max" (mctx's qtransform_by_parent_and_siblings): an
    # unvisited child is valued at its parent's Q, and Qs are rescaled to [0, 1] by the min and max of
    # the parent's and its visited children's Q, so c means the same whatever the reward's scale.
    q_transform: Literal["raw", "min_max"] = "raw"
    dirichlet_alpha: float = 0.3
    dirichlet_fraction: float = 0.0  # share of root prior replaced by Dirichlet noise (AlphaZero: 0.25)
    temperature: float = 1.0  # on the root visit counts: 0 = argmax, 1 = proportional
    leaves_per_step: int = 1  # leaves collected per tree per step, kept apart by virtual loss
    virtual_loss: float = 1.0
    max_tokens: int | None = None  # stop once expansions generated this many tokens (all roots)
    skip_solved: bool = False  # never re-enter a solved subtree (single-agent text: nothing to gain)

    def __post_init__(self):
        if self.num_simulations < 1 or self.max_depth < 1 or self.leaves_per_step < 1:
            raise ValueError("num_simulations, max_depth and leaves_per_step must be >= 1")
        if self.rule not in ("puct", "uct") or self.c < 0 or self.temperature < 0:
            raise ValueError(f"bad selection settings: rule={self.rule!r}, c={self.c}, temperature={self.temperature}")
        if self.q_transform not in ("raw", "min_max"):
            raise ValueError(f"q_transform must be 'raw' or 'min_max', got {self.q_transform!r}")


class Child(NamedTuple):
    action: Any
    state: Any
    prior: float
    info: dict = {}
    # Values of simulations the environment already ran through this child (e.g. rollouts to a finished
    # answer): backed up at creation, so the child starts with len(evaluations) visits.
    evaluations: tuple[float, ...] = ()


class Expansion(NamedTuple):
    """What an environment says about a leaf: its children and an estimate of its value (from the
    view of the player to move there; single-agent: just the value), and tokens it generated."""

    children: list[Child]
    value: float
    tokens: int = 0


class Environment(Protocol):
    two_player: bool

    def expand(self, states: Sequence[Any], rng: random.Random) -> list[Expansion]:
        """Expand many leaves at once (one batched model call for text)."""

    def is_terminal(self, state: Any) -> bool: ...

    def terminal_value(self, state: Any) -> float:
        """Value of a terminal (or depth-capped) state for the player to move there."""


@dataclass
class SearchResult:
    action: Any  # chosen root action: argmax of visits at temperature 0, else sampled from weights
    actions: list[Any]  # the root's children's actions, in order
    action_weights: list[float]  # visit distribution over `actions`, temperature applied
    tree: Tree
    simulations: int
    tokens: int
    seconds: float


def _q_values(parent, children, config: SearchConfig) -> list[float]:
    """Each child's Q as the rule reads it (see SearchConfig.q_transform)."""
    if config.q_transform == "raw":
        return [c.q for c in children]
    q = [c.q if c.visits else parent.q for c in children]
    seen = [parent.q, *(c.q for c in children if c.visits)]
    low, high = min(seen), max(seen)
    return [(x - low) / max(high - low, 1e-8) for x in q]


def _score(child, q: float, config: SearchConfig, sqrt_n: float, log_n: float) -> float:
    if config.rule == "puct":  # AlphaZero: Q + c * P * sqrt(N_parent) / (1 + N_child)
        return q + config.c * child.prior * sqrt_n / (1 + child.visits)
    if child.visits == 0:  # UCT (the original system): Q + c * sqrt(ln N_parent / N_child)
        return math.inf
    return q + config.c * math.sqrt(log_n / child.visits)


def _select(tree: Tree, config: SearchConfig) -> list[int]:
    """Root-to-leaf path: descend by the rule until an unexpanded or terminal node."""
    path = [0]
    node = tree.nodes[0]
    while node.expanded and not node.terminal and node.children:
        children = [tree.nodes[i] for i in node.children]
        candidates = range(len(children))
        if config.skip_solved:  # a solved child is entered once, so that its value is backed up
            candidates = [k for k in candidates if not (children[k].solved and children[k].visits)] or candidates
        sqrt_n, log_n = math.sqrt(max(node.visits, 1)), math.log(max(node.visits, 1))
        q = _q_values(node, children, config)
        best = max(candidates, key=lambda k: _score(children[k], q[k], config, sqrt_n, log_n))
        path.append(node.children[best])
        node = children[best]
    return path


def _apply(tree: Tree, path: list[int], visits: int, value: float, two_player: bool) -> None:
    """Add `visits` and `value` along the path; `value` is for the player to move at the leaf."""
    v = -value if two_player else value
    for i in reversed(path):
        node = tree.nodes[i]
        node.visits += visits
        node.value_sum += v
        if two_player:
            v = -v


def _mark_solved(tree: Tree, path: list[int]) -> None:
    for i in reversed(path):
        node = tree.nodes[i]
        node.solved = node.terminal or (node.expanded and all(tree.nodes[c].solved for c in node.children))
        if not node.solved:
            break


def _add_children(tree: Tree, leaf: int, expansion: Expansion, env: Environment, config: SearchConfig,
                  step: int) -> list[int]:
    node = tree.nodes[leaf]
    node.expanded, node.expanded_at = True, step
    added = []
    for child in expansion.children:
        terminal = tree.nodes[leaf].depth + 1 >= config.max_depth or env.is_terminal(child.state)
        info = dict(child.info)
        if terminal:
            info["terminal_value"] = env.terminal_value(child.state)
        added.append(tree.add_child(leaf, child.state, child.action, child.prior, terminal=terminal, solved=terminal,
                                    info=info))
    if not expansion.children:  # nothing to continue with: a dead end is terminal
        node.terminal, node.solved = True, True
        node.info["terminal_value"] = expansion.value
    return added


def _back_up(tree: Tree, path: list[int], expansion: Expansion, added: list[int], two_player: bool) -> None:
    """The leaf's value estimate, or, when the environment evaluated the new children itself, each
    child's evaluations through that child."""
    evaluated = [(i, child.evaluations) for i, child in zip(added, expansion.children) if child.evaluations]
    if not evaluated:
        _apply(tree, path, 1, expansion.value, two_player)
    for i, evaluations in evaluated:
        _apply(tree, [*path, i], len(evaluations), sum(evaluations), two_player)


def _root_noise(tree: Tree, config: SearchConfig, rng: random.Random) -> None:
    children = [tree.nodes[i] for i in tree.root.children]
    if config.dirichlet_fraction <= 0 or len(children) < 2:
        return
    noise = [rng.gammavariate(config.dirichlet_alpha, 1.0) for _ in children]
    total = sum(noise) or 1.0
    for child, x in zip(children, noise):
        child.prior = (1 - config.dirichlet_fraction) * child.prior + config.dirichlet_fraction * x / total


def visit_weights(visits: Sequence[int], temperature: float) -> list[float]:
    """pi(a) proportional to N(a)^(1/temperature); temperature 0 puts all weight on the most visited."""
    if not visits:
        return []
    if temperature == 0:
        best = max(range(len(visits)), key=visits.__getitem__)
        return [float(i == best) for i in range(len(visits))]
    powered = [n ** (1 / temperature) for n in visits]
    total = sum(powered)
    return [p / total for p in powered] if total else [1 / len(visits)] * len(visits)


def search(env: Environment, roots: Sequence[Any], config: SearchConfig, rng: random.Random) -> list[SearchResult]:
    """Search every root for `config.num_simulations` leaf evaluations (or until a budget runs out)."""
    start = time.perf_counter()
    trees = [Tree.with_root(state) for state in roots]
    simulations = [0] * len(trees)
    tokens = 0
    for tree in trees:
        if env.is_terminal(tree.root.state):
            tree.root.terminal = tree.root.solved = True
            tree.root.info["terminal_value"] = env.terminal_value(tree.root.state)
    step = 0
    while True:
        active = [t for t in range(len(trees))
                  if simulations[t] < config.num_simulations and not (config.skip_solved and trees[t].root.solved)]
        out_of_budget = config.max_tokens is not None and tokens >= config.max_tokens
        if not active or out_of_budget:
            break
        pending: list[tuple[int, list[int]]] = []
        for t in active:
            tree, claimed = trees[t], set()
            for _ in range(min(config.leaves_per_step, config.num_simulations - simulations[t])):
                path = _select(tree, config)
                leaf = tree.nodes[path[-1]]
                if leaf.terminal:  # known value: back it up, no model call
                    _apply(tree, path, 1, leaf.info["terminal_value"], env.two_player)
                    _mark_solved(tree, path)
                    simulations[t] += 1
                    continue
                if path[-1] in claimed:
                    break
                claimed.add(path[-1])
                _apply(tree, path, 1, -config.virtual_loss, False)  # discourages the next selection
                pending.append((t, path))
        if pending:
            expansions = env.expand([trees[t].nodes[path[-1]].state for t, path in pending], rng)
            for (t, path), expansion in zip(pending, expansions):
                tree = trees[t]
                _apply(tree, path, -1, config.virtual_loss, False)
                added = _add_children(tree, path[-1], expansion, env, config, step)
                if path[-1] == 0:
                    _root_noise(tree, config, rng)
                _back_up(tree, path, expansion, added, env.two_player)
                _mark_solved(tree, path)
                simulations[t] += 1
                tokens += expansion.tokens
        step += 1

    seconds = time.perf_counter() - start
    results = []
    for tree, sims in zip(trees, simulations):
        children = [tree.nodes[i] for i in tree.root.children]
        weights = visit_weights([c.visits for c in children], config.temperature)
        if not children:
            action = None
        elif config.temperature == 0:
            action = children[weights.index(1.0)].action
        else:
            action = rng.choices([c.action for c in children], weights=weights)[0]
        results.append(SearchResult(action, [c.action for c in children], weights, tree, sims, tokens, seconds))
    return results
