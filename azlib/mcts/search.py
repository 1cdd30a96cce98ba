"""One Monte Carlo tree search for games and for text: select (PUCT, UCT or Gumbel), expand a batch of
leaves with ONE environment call, back up. Pure function of environment, roots, settings and rng.

The shape follows mctx: `search(env, roots, settings, rng) -> [SearchResult(action, action_weights, tree)]`, its
rules functions that the search calls (a Q transform, a score, or Gumbel MuZero's policy), named by the settings
(Q_TRANSFORMS, RULES). Many roots (problems) are searched in lock-step, and each step may take several leaves per
tree (virtual loss; PUCT and UCT), so a text environment turns a whole step into one batched generate call.
"""

from __future__ import annotations

import math
import random
import sys
from dataclasses import asdict, dataclass, replace
from functools import partial
from typing import Annotated, Any, Callable, Literal, NamedTuple, Protocol, Sequence

from annotated_types import Ge, Gt, Le

from azlib.fields import check_fields
from azlib.mcts.tree import Backup, Node, Tree


@dataclass(frozen=True)
class SearchSettings:
    """Budgets and the selection rule. Defaults follow the original system (60 iterations, depth 12,
    c = 1.414); `NUM_MCTS_ITERATIONS`, `MAX_TREE_DEPTH`, `MAX_TOKENS` reach these through azlib.config."""

    num_simulations: Annotated[int, Ge(1)] = 60  # leaf evaluations per root; the root's own expansion is the first
    max_depth: Annotated[int, Ge(1)] = 12  # a node this deep is terminal
    # How a node picks the child to descend into (RULES maps each name to its policy below): "puct" (puct_scores,
    # AlphaZero), "uct" (uct_scores, the original system), "gumbel" (GumbelMuZeroPolicy, mctx's gumbel_muzero_policy:
    # one leaf per tree per step; it reads neither c, q_transform nor temperature, nor skip_solved at the root).
    rule: Literal["puct", "uct", "gumbel"] = "puct"
    c: Annotated[float, Ge(0)] = 1.414  # exploration constant of puct and uct
    # How puct and uct read Q (Q_TRANSFORMS maps each name to its function below): "raw" (q_raw; AlphaZero, the
    # original system), "parent_value" (q_by_parent_value), "mctx" (q_by_parent_and_siblings, mctx's default for
    # MuZero). The last two rescale Q to [0, 1], so that c means the same whatever the reward's scale.
    q_transform: Literal["raw", "parent_value", "mctx"] = "raw"
    max_considered_actions: Annotated[int, Ge(1)] = 16  # gumbel: root actions sampled without replacement (m; mctx's default)
    gumbel_scale: Annotated[float, Ge(0)] = 1.0  # gumbel: scale of the root's Gumbel noise; 0 searches without noise
    value_scale: Annotated[float, Gt(0)] = 0.1  # gumbel: c_scale in sigma(q) = (c_visit + max_b N(b)) * c_scale * q (mctx's default)
    maxvisit_init: Annotated[float, Ge(0)] = 50.0  # gumbel: c_visit in that sigma (mctx's default)
    dirichlet_alpha: Annotated[float, Gt(0)] = 0.3
    dirichlet_fraction: Annotated[float, Ge(0), Le(1)] = 0.0  # share of root prior replaced by Dirichlet noise (AlphaZero: 0.25); not gumbel
    temperature: Annotated[float, Ge(0)] = 1.0  # on the root visit counts: 0 = argmax, 1 = proportional
    leaves_per_step: Annotated[int, Ge(1)] = 1  # leaves collected per tree per step, kept apart by virtual loss
    virtual_loss: Annotated[float, Ge(0)] = 1.0
    max_tokens: Annotated[int, Ge(1)] | None = None  # stop once expansions generated this many tokens (all roots)
    skip_solved: bool = False  # never re-enter a solved subtree (single-agent text: nothing to gain)

    def __post_init__(self):
        check_fields(self)
        if self.rule == "gumbel" and (self.leaves_per_step != 1 or self.dirichlet_fraction):
            raise ValueError("rule 'gumbel' takes one leaf per tree per step (leaves_per_step=1) and explores by "
                             f"its Gumbel noise (dirichlet_fraction=0), got {self.leaves_per_step}, "
                             f"{self.dirichlet_fraction}")


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
    # The chosen root action: argmax of visits at temperature 0, else sampled from the weights; gumbel:
    # the considered action that survived sequential halving with the highest g + logits + sigma(Q).
    action: Any
    actions: list[Any]  # the root's children's actions, in order
    # Over `actions`: the visit distribution, temperature applied; gumbel: the improved policy
    # softmax(logits + sigma(completed Q)) (mctx's action_weights), the policy target of Gumbel MuZero.
    action_weights: list[float]
    tree: Tree
    simulations: int
    tokens: int  # generated by this root's expansions (a step's total is the sum over its results)


# Q transforms (mctx's qtransforms, passed to the selection rule as mctx passes `qtransform`): each child's Q as the
# score reads it, from the children (Node.q: their mean backed-up value, from the view of the player choosing among
# them, 0 while unvisited) and `node_value`, the parent's value from that same view (mctx's node_value: azlib's parent
# Q, negated in a two-player game, since a node's value_sum is from the view of whoever moved into it). A function of
# the node's children, not of copied lists: it runs at every node of every simulation.
QTransform = Callable[[Sequence[Node], float], list[float]]


def q_raw(children: Sequence[Node], node_value: float) -> list[float]:
    """The mean backed-up value, 0 for an unvisited child (AlphaZero, Silver et al. 2018). Node.q written out: this
    runs for every child of every node on every path, and a property call per child shows in the search's speed."""
    return [c.value_sum / c.visits if c.visits else 0.0 for c in children]


def q_by_parent_value(children: Sequence[Node], node_value: float, epsilon: float = 1e-8) -> list[float]:
    """An unvisited child valued at its parent (first-play urgency at the parent's value), then min-max
    rescaled over the parent and the visited children. azlib's rule: mctx's below but for unvisited children."""
    completed = [c.q if c.visits else node_value for c in children]
    low, high = min(node_value, *completed), max(node_value, *completed)
    return [(x - low) / max(high - low, epsilon) for x in completed]


def q_by_parent_and_siblings(children: Sequence[Node], node_value: float, epsilon: float = 1e-8) -> list[float]:
    """mctx's qtransforms.qtransform_by_parent_and_siblings: min-max rescaled over the parent and the
    visited children; an unvisited child completed with the minimum, so it reads 0."""
    safe_q = [c.q if c.visits else node_value for c in children]
    low, high = min(node_value, min(safe_q)), max(node_value, max(safe_q))
    completed = [x if c.visits else low for x, c in zip(safe_q, children)]
    return [(x - low) / max(high - low, epsilon) for x in completed]


# Selection scores (mctx's action_selection): each child's score from its Q (as a QTransform reads it), its prior and
# visits and the parent's visits; the search descends into the highest. One list per node, no call per child: this is
# the search's innermost loop.
Scores = Callable[[Sequence[Node], Sequence[float], int, float], list[float]]


def puct_scores(children: Sequence[Node], q: Sequence[float], parent_visits: int, c: float) -> list[float]:
    """PUCT, AlphaZero (Silver et al. 2018, Methods "Search"; mctx's muzero_action_selection with a constant c):
    Q + c * P * sqrt(N_parent) / (1 + N_child), N_parent at least 1."""
    sqrt_n = math.sqrt(max(parent_visits, 1))
    return [x + c * child.prior * sqrt_n / (1 + child.visits) for x, child in zip(q, children)]


def uct_scores(children: Sequence[Node], q: Sequence[float], parent_visits: int, c: float) -> list[float]:
    """UCT (Kocsis & Szepesvari 2006, "Bandit based Monte-Carlo planning"; the original system's rule):
    Q + c * sqrt(ln N_parent / N_child), N_parent at least 1, an unvisited child first."""
    log_n = math.log(max(parent_visits, 1))
    return [x + c * math.sqrt(log_n / child.visits) if child.visits else math.inf for x, child in zip(q, children)]


class Policy(Protocol):
    """What the search asks of its rule (mctx's policies: muzero_policy, gumbel_muzero_policy), built from the
    settings by RULES."""

    def select(self, node: Node, children: list[Node], candidates: Sequence[int] | None, at_root: bool) -> int:
        """The index of the child to descend into; only `candidates` (None: all) below the root."""

    def expanded(self, tree: Tree, leaf: int, value: float, rng: random.Random) -> None:
        """Called once the leaf has its children, with the environment's value estimate of it."""

    def decide(self, root: Node, children: list[Node], rng: random.Random) -> tuple[int, list[float]]:
        """After the search: the root child to move to, and the action weights over the root's children."""

    def terms(self, node: Node, children: list[Node]) -> list[tuple[float, float]] | None:
        """(Q as the rule reads it, the whole score) per child, or None for a rule that ranks by no Q + U."""


class AlphaZeroPolicy:
    """AlphaZero's search (Silver et al. 2018) with its score and Q transform passed in, as mctx's muzero_policy
    takes its qtransform: descend into the first highest score; Dirichlet noise mixed into the root prior; move by
    the root's visit counts (temperature 0: the most visited; else sampled from visit_weights)."""

    def __init__(self, scores: Scores, settings: SearchSettings, two_player: bool):
        self.scores, self.q_transform = scores, Q_TRANSFORMS[settings.q_transform]
        self.settings, self.c, self.two_player = settings, settings.c, two_player

    def _q_scores(self, node: Node, children: list[Node]) -> tuple[list[float], list[float]]:
        """Each child's Q as the score reads it, and its score: what the search ranks and the widget shows."""
        q = self.q_transform(children, -node.q if self.two_player else node.q)
        return q, self.scores(children, q, node.visits, self.c)

    def terms(self, node: Node, children: list[Node]) -> list[tuple[float, float]]:
        return list(zip(*self._q_scores(node, children)))

    def select(self, node: Node, children: list[Node], candidates: Sequence[int] | None, at_root: bool) -> int:
        _, scores = self._q_scores(node, children)
        # the first highest among the candidates (list.index finds the first, without a call per child)
        return scores.index(max(scores)) if candidates is None else max(candidates, key=scores.__getitem__)

    def expanded(self, tree: Tree, leaf: int, value: float, rng: random.Random) -> None:
        if leaf == 0:
            _root_noise(tree, self.settings, rng)

    def decide(self, root: Node, children: list[Node], rng: random.Random) -> tuple[int, list[float]]:
        weights = visit_weights([c.visits for c in children], self.settings.temperature)
        if self.settings.temperature == 0:
            return weights.index(1.0), weights
        return rng.choices(range(len(children)), weights=weights)[0], weights


# Gumbel MuZero (Danihelka et al. 2022, "Policy improvement by planning with Gumbel"), as mctx's
# gumbel_muzero_policy. The prior's logits are log P; a zero prior gets mctx's floor LOW_LOGIT.
LOW_LOGIT = -1e9


def _logits(priors: Sequence[float]) -> list[float]:
    return [math.log(p) if p > 0 else LOW_LOGIT for p in priors]


def _softmax(x: Sequence[float]) -> list[float]:
    top = max(x)
    e = [math.exp(v - top) for v in x]
    return [v / sum(e) for v in e]


def q_completed_by_mix_value(q: Sequence[float], visits: Sequence[int], priors: Sequence[float], raw_value: float,
                             value_scale: float = 0.1, maxvisit_init: float = 50.0,
                             epsilon: float = 1e-8) -> list[float]:
    """sigma(completed Q), mctx's qtransforms.qtransform_completed_by_mix_value (the paper, Sec. 4 and App. D):
    an unvisited child gets the mixed value (the node's raw value and its visited children's prior-weighted
    Q, weighted 1 : sum N), all are min-max rescaled, then scaled by (c_visit + max N) * c_scale."""
    total = sum(visits)
    probs = [max(p, sys.float_info.min) for p in _softmax(_logits(priors))]
    visited_mass = sum(p for p, n in zip(probs, visits) if n)
    weighted_q = sum(p * x / visited_mass for p, x, n in zip(probs, q, visits) if n) if visited_mass else 0.0
    mixed = (raw_value + total * weighted_q) / (total + 1)
    completed = [x if n else mixed for x, n in zip(q, visits)]
    low, high = min(completed), max(completed)
    scale = (maxvisit_init + max(visits)) * value_scale
    return [scale * (x - low) / max(high - low, epsilon) for x in completed]


def sequence_of_considered_visits(max_num_considered_actions: int, num_simulations: int) -> tuple[int, ...]:
    """mctx's seq_halving.get_sequence_of_considered_visits: for each simulation, the visit count that
    sequential halving (Karnin et al. 2013) asks of the root action it visits. Each phase visits every
    surviving action num_simulations / (log2(m) * survivors) times, then halves the survivors (to >= 2)."""
    if max_num_considered_actions <= 1:
        return tuple(range(num_simulations))
    log2max = int(math.ceil(math.log2(max_num_considered_actions)))
    sequence: list[int] = []
    visits = [0] * max_num_considered_actions
    num_considered = max_num_considered_actions
    while len(sequence) < num_simulations:
        num_extra_visits = max(1, int(num_simulations / (log2max * num_considered)))
        for _ in range(num_extra_visits):
            sequence.extend(visits[:num_considered])
            for i in range(num_considered):
                visits[i] += 1
        num_considered = max(2, num_considered // 2)
    return tuple(sequence[:num_simulations])


class GumbelMuZeroPolicy:
    """Gumbel MuZero (Danihelka et al. 2022), as mctx's gumbel_muzero_policy: the root samples Gumbel noise once and
    shares the simulations among its top `max_considered_actions` by sequential halving; below the root, the
    deterministic rule that makes the visits follow the improved policy; Q read by q_completed_by_mix_value (the
    environment's value estimate of a node is its raw value). Does not read c, q_transform or temperature; at the
    root, not skip_solved either (sequential halving keeps its own count)."""

    def __init__(self, settings: SearchSettings, two_player: bool):
        self.settings = settings

    def terms(self, node: Node, children: list[Node]) -> None:
        return None

    def _sigma(self, node: Node, children: Sequence[Node]) -> list[float]:
        return q_completed_by_mix_value([c.q for c in children], [c.visits for c in children],
                                        [c.prior for c in children], node.info["raw_value"],
                                        self.settings.value_scale, self.settings.maxvisit_init)

    def _improved(self, node: Node, children: Sequence[Node]) -> list[float]:
        """The improved policy softmax(logits + sigma(completed Q)) (the paper, Sec. 4)."""
        return _softmax([lg + s for lg, s in zip(_logits([c.prior for c in children]), self._sigma(node, children))])

    def _root_scores(self, root: Node, children: Sequence[Node]) -> list[float]:
        """g + logits + sigma(completed Q) per root child, mctx's seq_halving.score_considered before its
        visit-count mask (logits shifted by their max, the sum floored at LOW_LOGIT)."""
        logits = _logits([c.prior for c in children])
        top = max(logits)
        return [max(LOW_LOGIT, c.info["gumbel"] + lg - top + s)
                for c, lg, s in zip(children, logits, self._sigma(root, children))]

    def select(self, node: Node, children: list[Node], candidates: Sequence[int] | None, at_root: bool) -> int:
        if at_root:
            best = self._root_select(node, children)
            children[best].info["simulations"] += 1  # sequential halving counts the simulations it sends
            return best
        # mctx's action_selection.gumbel_muzero_interior_action_selection (the paper, Sec. 5): argmax of
        # pi'(a) - N(a) / (1 + sum_b N(b)), so that the visits follow the improved policy pi' deterministically.
        improved = self._improved(node, children)
        total = sum(c.visits for c in children)
        return max(range(len(children)) if candidates is None else candidates,
                   key=lambda k: improved[k] - children[k].visits / (1 + total))

    def _root_select(self, root: Node, children: Sequence[Node]) -> int:
        """mctx's action_selection.gumbel_muzero_root_action_selection: among the considered actions whose
        count equals the one sequential halving asks for now, the highest g + logits + sigma(completed Q).
        The count is of the simulations sent through the child (info["simulations"]): on games that is its
        visits, as in mctx; a text child's visits also count the rollouts it arrived with, no simulations."""
        considered = [k for k, c in enumerate(children) if c.info["considered"]]
        counts = [c.info["simulations"] for c in children]
        # mctx evaluates the root outside its budget; here its expansion is the first simulation.
        table = sequence_of_considered_visits(len(considered), self.settings.num_simulations - 1)
        target = table[min(sum(counts), len(table) - 1)]
        scores = self._root_scores(root, children)
        # not empty while every simulation counts
        eligible = [k for k in considered if counts[k] == target] or considered
        return max(eligible, key=scores.__getitem__)

    def expanded(self, tree: Tree, leaf: int, value: float, rng: random.Random) -> None:
        """The environment's value estimate is the node's raw value (mctx's raw_value); once per search, at the
        root's expansion: Gumbel noise g(a) for every root action, and the top max_considered_actions by g + logits
        considered (sampling without replacement, the Gumbel-top-k trick)."""
        tree.nodes[leaf].info["raw_value"] = value
        if leaf != 0:
            return
        children = [tree.nodes[i] for i in tree.root.children]
        logits = _logits([c.prior for c in children])
        scale = self.settings.gumbel_scale
        for child in children:  # -log(-log U), U in (0, 1)
            child.info["gumbel"] = scale * -math.log(-math.log(max(rng.random(), sys.float_info.min)))
            child.info["considered"], child.info["simulations"] = False, 0
        order = sorted(range(len(children)), key=lambda k: -(children[k].info["gumbel"] + logits[k]))
        for k in order[:self.settings.max_considered_actions]:
            children[k].info["considered"] = True

    def decide(self, root: Node, children: list[Node], rng: random.Random) -> tuple[int, list[float]]:
        """Among the considered actions sent the most simulations (the survivors of sequential halving), the
        highest g + logits + sigma(completed Q); and the improved policy as the action weights (mctx's
        action_weights, the policy target of Gumbel MuZero)."""
        considered = [k for k, c in enumerate(children) if c.info["considered"]]
        most = max(children[k].info["simulations"] for k in considered)
        scores = self._root_scores(root, children)
        best = max((k for k in considered if children[k].info["simulations"] == most), key=scores.__getitem__)
        return best, self._improved(root, children)


# The names the settings use (SearchSettings.q_transform and .rule), each to its function; the search calls these.
Q_TRANSFORMS: dict[str, QTransform] = {"raw": q_raw, "parent_value": q_by_parent_value,
                                       "mctx": q_by_parent_and_siblings}
RULES: dict[str, Callable[[SearchSettings, bool], Policy]] = {
    "puct": partial(AlphaZeroPolicy, puct_scores), "uct": partial(AlphaZeroPolicy, uct_scores),
    "gumbel": GumbelMuZeroPolicy}


def _select(tree: Tree, policy: Policy, skip_solved: bool) -> list[int]:
    """Root-to-leaf path: descend by the policy until an unexpanded or terminal node."""
    nodes, path = tree.nodes, [0]
    node = nodes[0]
    select = policy.select
    while node.expanded and not node.terminal and node.children:
        children = [nodes[i] for i in node.children]
        candidates = None
        if skip_solved:  # a solved child is entered once, so that its value is backed up
            candidates = [k for k in range(len(children)) if not (children[k].solved and children[k].visits)] or \
                range(len(children))
        best = select(node, children, candidates, len(path) == 1)
        path.append(node.children[best])
        node = children[best]
    return path


def selection_terms(tree: Tree, parent: int) -> list[tuple[float, float]] | None:
    """(Q term, score = Q + U) of each child of `parent` as it ranks them for the next simulation, by the rule the
    tree was searched with (tree.settings); None for gumbel (sequential halving, no Q + U) or a tree not from search."""
    if not tree.settings:
        return None
    node = tree.nodes[parent]
    settings = SearchSettings(**tree.settings)
    return RULES[settings.rule](settings, tree.two_player).terms(node, [tree.nodes[i] for i in node.children])


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


def _add_children(tree: Tree, leaf: int, expansion: Expansion, env: Environment, settings: SearchSettings,
                  simulation: int) -> list[int]:
    node = tree.nodes[leaf]
    node.expanded, node.expanded_at = True, simulation
    added = []
    for child in expansion.children:
        terminal = tree.nodes[leaf].depth + 1 >= settings.max_depth or env.is_terminal(child.state)
        info = dict(child.info)
        if terminal:
            info["terminal_value"] = env.terminal_value(child.state)
        added.append(tree.add_child(leaf, child.state, child.action, child.prior, terminal=terminal, solved=terminal,
                                    info=info))
    if not expansion.children:  # nothing to continue with: a dead end is terminal
        node.terminal, node.solved = True, True
        node.info["terminal_value"] = expansion.value
    return added


def _expansion_backups(path: list[int], expansion: Expansion, added: list[int]) -> list[Backup]:
    """The leaf's value estimate, or, when the environment evaluated the new children itself, each
    child's evaluations through that child."""
    return [Backup([*path, i], len(child.evaluations), sum(child.evaluations))
            for i, child in zip(added, expansion.children) if child.evaluations] or [Backup(path, 1, expansion.value)]


def _back_up(tree: Tree, backups: list[Backup], replay: bool) -> None:
    """One simulation's values added along their paths; with `replay`, also recorded in tree.history for tree_after."""
    for backup in backups:
        _apply(tree, backup.path, backup.visits, backup.value, tree.two_player)
    if replay:
        tree.history.append(backups)


def tree_after(tree: Tree, simulations: int) -> Tree:
    """The tree as it stood after its first `simulations` simulations, rebuilt from tree.history (a search run with
    replay=True) by the search's own backup: the same node indices, those not created yet left out of every
    `children` list, and visits and values as they were then. The search's final tree is
    tree_after(tree, len(tree.history)) (tested)."""
    if simulations > len(tree.history):
        raise ValueError(f"the tree recorded {len(tree.history)} simulations, asked for the tree after {simulations} "
                         "(search with replay=True records every simulation)")
    done = tree.history[:simulations]
    walked = {i for backups in done for backup in backups for i in backup.path}

    def existed(i: int) -> bool:  # the root, on a path walked by then, or a child of a node expanded by then
        node = tree.nodes[i]
        return node.parent < 0 or i in walked or 0 <= tree.nodes[node.parent].expanded_at < simulations

    then = replace(tree, nodes=[replace(n, visits=0, value_sum=0.0, children=[c for c in n.children if existed(c)],
                                        expanded=n.expanded and 0 <= n.expanded_at < simulations)
                                for n in tree.nodes], history=[])
    for backups in done:
        _back_up(then, backups, replay=True)
    return then


def _root_noise(tree: Tree, settings: SearchSettings, rng: random.Random) -> None:
    children = [tree.nodes[i] for i in tree.root.children]
    if settings.dirichlet_fraction <= 0 or len(children) < 2:
        return
    noise = [rng.gammavariate(settings.dirichlet_alpha, 1.0) for _ in children]
    total = sum(noise) or 1.0
    for child, x in zip(children, noise):
        child.prior = (1 - settings.dirichlet_fraction) * child.prior + settings.dirichlet_fraction * x / total


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


def search(env: Environment, roots: Sequence[Any], settings: SearchSettings, rng: random.Random, *,
           replay: bool = False) -> list[SearchResult]:
    """Search every root for `settings.num_simulations` leaf evaluations (or until a budget runs out). With `replay`,
    each tree also records every simulation's backups in tree.history, for tree_after and TreeWidget's slider (a
    cost per simulation that a search nothing replays does without)."""
    trees = [Tree.with_root(state, two_player=env.two_player, settings=asdict(settings)) for state in roots]
    policy = RULES[settings.rule](settings, env.two_player)
    tokens = [0] * len(trees)  # generated by each tree's expansions
    simulations = [0] * len(trees)  # backed up in each tree so far
    for tree in trees:
        if env.is_terminal(tree.root.state):
            tree.root.terminal = tree.root.solved = True
            tree.root.info["terminal_value"] = env.terminal_value(tree.root.state)
    while True:
        active = [t for t in range(len(trees))
                  if simulations[t] < settings.num_simulations and not (settings.skip_solved and trees[t].root.solved)]
        out_of_budget = settings.max_tokens is not None and sum(tokens) >= settings.max_tokens
        if not active or out_of_budget:
            break
        pending: list[tuple[int, list[int]]] = []
        for t in active:
            tree, claimed = trees[t], set()
            for _ in range(min(settings.leaves_per_step, settings.num_simulations - simulations[t])):
                path = _select(tree, policy, settings.skip_solved)
                leaf = tree.nodes[path[-1]]
                if leaf.terminal:  # known value: back it up, no model call
                    _back_up(tree, [Backup(path, 1, leaf.info["terminal_value"])], replay)
                    simulations[t] += 1
                    _mark_solved(tree, path)
                    continue
                if path[-1] in claimed:
                    break
                claimed.add(path[-1])
                _apply(tree, path, 1, -settings.virtual_loss, False)  # discourages the next selection
                pending.append((t, path))
        if pending:
            expansions = env.expand([trees[t].nodes[path[-1]].state for t, path in pending], rng)
            for (t, path), expansion in zip(pending, expansions):
                tree = trees[t]
                _apply(tree, path, -1, settings.virtual_loss, False)
                added = _add_children(tree, path[-1], expansion, env, settings, simulations[t])
                policy.expanded(tree, path[-1], expansion.value, rng)
                _back_up(tree, _expansion_backups(path, expansion, added), replay)
                simulations[t] += 1
                _mark_solved(tree, path)
                tokens[t] += expansion.tokens

    results = []
    for tree, done, spent in zip(trees, simulations, tokens):
        children = [tree.nodes[i] for i in tree.root.children]
        action, weights = None, []
        if children:
            best, weights = policy.decide(tree.root, children, rng)
            action = children[best].action
        results.append(SearchResult(action, [c.action for c in children], weights, tree, done, spent))
    return results
