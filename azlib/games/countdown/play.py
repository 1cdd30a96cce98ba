"""Playing Countdown with the policy: independent episodes (sampled, greedy) and games searched by azlib.mcts.search
over the lines the model writes or every legal line it scores; the rules write every result. No update (arms.py)."""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Literal, NamedTuple, Sequence

import torch

from azlib.games.countdown.compute import Compute, trie_characters
from azlib.games.countdown.policy import Line, Policy
from azlib.games.countdown.rules import (MOVE_END, Move, State, apply, legal_lines, legal_moves, problem_text, solvable,
                                         step, written_result)
from azlib.games.countdown.settings import CountdownSearchSettings
from azlib.mcts import selfplay
from azlib.mcts.search import Child, Expansion
from azlib.settings import SearchSettings


@dataclass
class Episode:
    """One problem played line by line: the whole text, which of its characters the model wrote, where each state's
    text ends (the value is read there), the states, and how it ended. A search's node holds one as its state, shared
    by the search's cache and every tree that reaches it: played on only through `copy`."""

    problem: State
    text: str
    written: list[bool]
    state_ends: list[int]  # index of the last character of each state's text (the problem's, then after each move)
    states: list[State]
    refused: bool = False  # the rules refused a line: the episode is lost
    tokens: int = 0  # characters the model generated
    values: list[float] = field(default_factory=list)  # play_episodes: the value head's reading of each state played

    @classmethod
    def start(cls, problem: State) -> Episode:
        text = problem_text(problem)
        return cls(problem, text, [False] * len(text), [len(text) - 1], [problem])

    @classmethod
    def from_json(cls, data: dict) -> Episode:
        """The episode a saved tree holds (Tree.save writes it as a dict of its fields): Tree.load's `decode`."""
        states = [State(target, tuple(numbers)) for target, numbers in data["states"]]
        return cls(states[0], data["text"], data["written"], data["state_ends"], states, data["refused"],
                   data["tokens"], data.get("values", []))

    @property
    def state(self) -> State:
        return self.states[-1]

    @property
    def over(self) -> bool:
        return self.refused or self.state.finished

    @property
    def solved(self) -> bool:
        return not self.refused and self.state.solved

    def copy(self) -> Episode:
        """The episode so far, to play on without changing this one (a search node's state never changes)."""
        return Episode(self.problem, self.text, list(self.written), list(self.state_ends), list(self.states),
                       self.refused, self.tokens, list(self.values))

    def line_starts(self) -> list[tuple[int, State]]:
        """Where each line the model wrote begins, and the state it was written in."""
        return [(end + 1, state) for end, state in zip(self.state_ends, self.states) if end + 1 < len(self.text)]

    def play_move(self, move: Move) -> None:
        """A move written out as the model writes it (its characters counted as if generated): the solver's and a
        random walk's moves."""
        self.play(Line(str(move), 0.0, len(str(move)) + 1, True))

    def play(self, line: Line) -> None:
        """The model's line, then the rules' answer: the result and the numbers left, or a refusal (a loss)."""
        after = step(self.state, line.text) if line.ended else None
        mine = line.text + (MOVE_END if line.ended else "")
        self.text += mine
        self.written += [True] * len(mine)
        self.tokens += line.tokens
        if after is None:
            self.refused = True
            return
        rules = written_result(after)
        self.text += rules
        self.written += [False] * len(rules)
        self.states.append(after)
        self.state_ends.append(len(self.text) - 1)


def offered(policy: Policy, states: Sequence[State]) -> list[list[str]] | None:
    """What the engine offers the policy at each state: every legal line with its end mark, or None (anything goes,
    and the rules refuse what is illegal) when the policy plays without the mask."""
    return [legal_lines(s) for s in states] if policy.legal_only else None


def legal_spans(policy: Policy, episodes: Sequence[Episode]) -> list[list[tuple[int, list[str]]]] | None:
    """For Policy.transcript_logprobs: each model-written line's start and the legal lines there (None: no mask)."""
    if not policy.legal_only:
        return None
    return [[(start, legal_lines(state)) for start, state in e.line_starts()] for e in episodes]


def play_episodes(policy: Policy, problems: Sequence[State], n: int, temperature: float,
                  generator: torch.Generator | None = None) -> list[list[Episode]]:
    """`n` independent episodes per problem (temperature 0: greedy), all in lock-step: one batched `lines` call per
    move over every episode still going; each episode records the value the same forward read of every state it
    was played from."""
    episodes = [[Episode.start(p) for _ in range(n)] for p in problems]
    flat = [e for group in episodes for e in group]
    first = True
    while live := [e for e in flat if not e.over]:
        if first:  # the n episodes of a problem share its text: sample n lines from one context
            lines, values = policy.lines([g[0].text for g in episodes], n, temperature, generator,
                                         offered(policy, [g[0].state for g in episodes]))
            drawn = [line for group in lines for line in group]
            values = [v for v in values for _ in range(n)]
            first = False
        else:
            lines, values = policy.lines([e.text for e in live], 1, temperature, generator,
                                         offered(policy, [e.state for e in live]))
            drawn = [group[0] for group in lines]
        for episode, line, value in zip(live, drawn, values):
            episode.values.append(value)
            episode.play(line)
    return episodes


def play_greedy(policy: Policy, problems: Sequence[State]) -> list[Episode]:
    """One greedy episode per problem (temperature 0), in lock-step."""
    return [group[0] for group in play_episodes(policy, problems, 1, 0.0)]


# -- the search over the model's lines ---------------------------------------------------------------------------

Value = Literal["learned", "oracle", "none"]
NO_VALUE = 0.5  # every open state's value where the search reads none: only the ends' exact values inform it


class LineSearch:
    """The environment `azlib.mcts.search` plays: a node's children come from the lines among `candidates` the
    model samples there (sampled AlphaZero, Hubert et al. 2021), or from every legal line with the model's
    probability of it as its prior (settings.children "listed": AlphaZero's listed moves), each applied by the
    rules (a refused line is a lost terminal child); one child per position they reach (settings.children_by). Values: the value head (of the policy, or of `judge`, a separate net), the exact
    oracle (1 if the target is still reachable), or none (NO_VALUE everywhere); a finished state's value is exact, 1
    if solved, else 0. With settings.child_values each child is evaluated as it is made, so that the search
    compares siblings by value before it visits them (the estimate is a child's first Q, not a visit); the expanded
    leaf's own value, read by the same forward pass that writes or scores its lines, is the simulation's one backup.
    One policy call and at most one value call per search step over every leaf (and as many again for the nodes
    the step widens: settings.widen_after draws `candidates` more lines there); expansions are kept by text (the
    net does not change while this env lives), so a later search from a child reuses its expansions (not their
    visits) and counts no token twice. With `compute`, every character a net computes is charged to its problem
    (azlib.games.countdown.compute) and each problem's first answer is marked there."""

    two_player = False

    def __init__(self, policy: Policy, settings: CountdownSearchSettings, value: Value,
                 generator: torch.Generator | None = None, judge: Policy | None = None,
                 compute: Compute | None = None):
        self.policy, self.settings, self.value, self.generator = policy, settings, value, generator
        self.judge, self.compute = judge, compute
        self.cache: dict[str, Expansion] = {}
        self.drawn: dict[str, list[Line]] = {}  # every line sampled at a state, by its text (what widen adds to)
        self.tokens = 0  # generated characters over the env's life
        self.value_evaluations = 0  # states the value head was asked about (forward passes, no generated characters)
        self.solved_found = set()  # texts of solved states any expansion reached

    def is_terminal(self, state: Episode) -> bool:
        return state.over

    def terminal_value(self, state: Episode) -> float:
        return float(state.solved)

    def expand(self, states: Sequence[Episode], rng: random.Random) -> list[Expansion]:
        by_text = {s.text: s for s in states if s.text not in self.cache}
        if by_text:
            new, episodes = list(by_text), list(by_text.values())
            lines, own_values = self._lines(new, episodes)
            self._grow(new, episodes, lines, self._leaf_values(new, episodes, own_values))
        return [self._reuse(s.text) for s in states]

    def _grow(self, texts: list[str], episodes: list[Episode], lines: list[list[Line]], leaf_values: list[float]
              ) -> None:
        """Each state's expansion from the lines drawn there so far and these: the children it had (their priors now
        from all the lines), then the children the new lines add, each valued as it is made; what the policy computed
        (generated characters; listed lines are scored, not generated: their trie's characters) counted."""
        groups = [self._children(e, self.drawn.get(text, []) + drawn) for text, e, drawn in zip(texts, episodes, lines)]
        kept = [self.cache[text].children if text in self.cache else [] for text in texts]
        values = self._values(texts, [[child for _, child, _ in group[len(had):]] for group, had in zip(groups, kept)])
        for text, episode, group, drawn, had, leaf_value in zip(texts, episodes, groups, lines, kept, leaf_values):
            if self.settings.children == "sampled":
                tokens = sum(line.tokens for line in drawn)
                if self.compute is not None:
                    self.compute.generate(text, tokens)
            else:
                tokens = trie_characters([line.text + MOVE_END for line in drawn])
            self.tokens += tokens
            self.drawn[text] = self.drawn.get(text, []) + drawn
            children = [c._replace(prior=prior, info=c.info | info) for c, (_, _, (prior, info)) in zip(had, group)]
            children += [Child(line, child, prior, info, value=next(values))
                         for line, child, (prior, info) in group[len(had):]]
            self.cache[text] = Expansion(children, leaf_value, tokens, self._complete(episode, group))

    def _reuse(self, text: str) -> Expansion:
        """A state's expansion; expanded before (another tree, an earlier search), it costs no tokens again."""
        expansion = self.cache[text]
        self.cache[text] = expansion._replace(tokens=0)
        return expansion

    def _complete(self, episode: Episode, group: list) -> bool:
        """Whether these children reach every position there is: listed, or every legal line's position drawn."""
        return self.settings.children == "listed" or every_position_reached(
            episode.state, [child.state for _, child, (_, info) in group if not info["refused"]])

    def widen(self, states: Sequence[Episode], rng: random.Random) -> list[Expansion]:
        """`candidates` more lines sampled at each state (progressive widening): the children as before, their
        priors now their lines' share of all the samples drawn there, then the children the new lines add (each
        valued as a child of expand is)."""
        by_text = {s.text: s for s in states}
        texts = [text for text in by_text if not self.cache[text].complete]  # another tree may have completed it
        if texts:
            episodes = [by_text[text] for text in texts]
            lines, _ = self._lines(texts, episodes)
            self._grow(texts, episodes, lines, [self.cache[text].value for text in texts])
        return [self._reuse(s.text) for s in states]

    def _lines(self, texts: list[str], episodes: list[Episode]) -> tuple[list[list[Line]], list[float]]:
        """Each leaf's lines, sampled or listed and scored, and the policy's value of the leaf (the same forward);
        what the policy computed charged to each problem."""
        if self.settings.children == "listed":
            listed = [legal_lines(e.state) for e in episodes]
            scores, own_values = self.policy.score_lines(texts, listed)
            lines = [[Line(line.removesuffix(MOVE_END), lp, 0, True) for line, lp in zip(group, lps)]
                     for group, lps in zip(listed, scores)]
        else:
            lines, own_values = self.policy.lines(texts, self.settings.candidates, self.settings.temperature,
                                                  self.generator, offered(self.policy, [e.state for e in episodes]))
        if self.compute is not None:
            for text, episode, drawn in zip(texts, episodes, lines):
                self._charge(text, episode, drawn)
        return lines, own_values

    def _charge(self, text: str, episode: Episode, drawn: list[Line]) -> None:
        """What the policy computed at this leaf: its text, then its lines. Sampled lines are charged in the order
        drawn, an answer marked at the first line that solves the problem (as best-of-k's samples are); listed lines
        are scored in one pass, so all of them come before any answer among them (Compute keeps the first mark)."""
        self.compute.charge(text)
        solves = [line.ended and (after := step(episode.state, line.text)) is not None and after.solved
                  for line in drawn]
        for line, solved in zip(drawn, solves):
            self.compute.charge(text + line.text + (MOVE_END if line.ended else ""))
            if solved and self.settings.children == "sampled":
                self.compute.answered(text)
        if any(solves):
            self.compute.answered(text)

    def _leaf_values(self, texts: list[str], episodes: list[Episode], own_values: list[float]) -> list[float]:
        if self.value == "oracle":
            return [float(solvable(e.state)) for e in episodes]
        if self.value == "none":
            return [NO_VALUE] * len(texts)
        if self.judge is None:
            return own_values
        return self._read_values(texts)

    def _read_values(self, texts: list[str], parents: list[str] | None = None) -> list[float]:
        """The value net's values of these texts (the judge's, else the policy's head) in one batched call, what it
        computed charged to each problem under its own name. With `parents` (each text's parent state), a parent is
        computed once and its children's characters read its cached keys (Policy.values' contexts)."""
        net, name = (self.policy, "policy") if self.judge is None else (self.judge, "judge")
        if self.compute is not None:
            for text in texts:
                self.compute.charge(text, name)
        self.value_evaluations += len(texts)
        return net.values(texts, parents)

    def _children(self, episode: Episode, drawn: list[Line]) -> list[tuple[str, Episode, tuple[float, dict]]]:
        """The children `drawn` makes, each applied by the rules: (line, the episode after it, (prior, info)). One per
        distinct line, or (settings.children_by "position") per position the accepted lines reach, its prior theirs
        summed and its line the first drawn (listed: the most probable); info["lines"] holds each merged line with
        its prior, the policy target's lines. A refused line stays a child of its own."""
        distinct: dict[tuple[str, bool], list[Line]] = {}
        for line in drawn:
            distinct.setdefault((line.text, line.ended), []).append(line)
        if self.settings.prior == "sampled" and self.settings.children == "sampled":
            priors = [len(same) / len(drawn) for same in distinct.values()]
        else:  # listed lines' probabilities already sum to 1 under the legal mask
            priors = torch.tensor([same[0].logprob for same in distinct.values()]).softmax(0).tolist()
        merged: dict[tuple, list[tuple[list[Line], float]]] = {}
        for ((text, ended), same), prior in zip(distinct.items(), priors):
            after = step(episode.state, text) if ended else None
            key = ("position", after.position) if after is not None and self.settings.children_by == "position" \
                else ("line", text, ended)
            merged.setdefault(key, []).append((same, prior))
        out = []
        for group in merged.values():
            same, _ = group[0] if self.settings.children == "sampled" else max(group, key=lambda g: g[1])
            child = episode.copy()
            child.play(same[0])
            if child.solved:
                self.solved_found.add(child.text)
            line = same[0].text + ("" if same[0].ended else " (unended)")  # kept apart from the same text ended
            info = {"line": line, "lines": [(s[0].text, prior) for s, prior in group],
                    "samples": sum(len(s) for s, _ in group), "refused": child.refused,
                    "solvable": not child.refused and solvable(child.state)}
            out.append((line, child, (sum(prior for _, prior in group), info)))
        return out

    def _values(self, parents: list[str], groups: list[list[Episode]]):
        """Each new child's one evaluation, in order (None without settings.child_values): exact at an end (1 if
        solved, else 0), else the oracle's, NO_VALUE, or the value net's (one batched call for every open child of
        the step, each parent's text computed once, its reading of each child's text charged). `groups[i]`: the
        new children of the state whose text is `parents[i]`."""
        children = [child for group in groups for child in group]
        if not self.settings.child_values:
            return iter([None] * len(children))
        opened = [(child.text, parent) for parent, group in zip(parents, groups) for child in group if not child.over]
        learned = iter(self._read_values([text for text, _ in opened], [parent for _, parent in opened])
                       if self.value == "learned" and opened else [])
        return iter([float(c.solved) if c.over else float(solvable(c.state)) if self.value == "oracle"
                     else NO_VALUE if self.value == "none" else next(learned) for c in children])


class SearchedMove(NamedTuple):
    """One move of a searched game: the state's text and state, its candidate lines that the rules accept with their
    share of the root's visits (renormalised over those lines, a child's share spread over the lines merged in it by
    their priors: the policy target), the line played, and what the
    move's search learnt of the states it expanded (`subtree_labels`, each state once a game)."""

    text: str
    state: State
    lines: list[str]
    targets: list[float]
    played: str
    labels: tuple[tuple[str, float], ...] = ()


def every_position_reached(state: State, reached: Sequence[State]) -> bool:
    """Whether the states `reached` (accepted lines') include the position after every legal move of `state`: then
    every game on from it is below them. Without the legal mask the rules accept texts that are no legal line
    (`03*4`, the position of 3*4=), so lines are compared by where they lead, not counted."""
    return {apply(state, move).position for move in legal_moves(state)} <= {s.position for s in reached}


def shares(merged: Sequence[tuple[str, float]]) -> list[float]:
    """Each merged line's share of its child: its prior over theirs, or even where every prior underflowed to 0."""
    total = sum(prior for _, prior in merged)
    return [prior / total if total > 0 else 1 / len(merged) for _, prior in merged]


def subtree_labels(tree) -> dict[str, float]:
    """What a search's tree proves of each state it expanded below its root, by the text of the state: 1 where a
    solved end lies below it, 0 where every position below it was searched to an end without one. Both exact; a
    state whose subtree proves neither (some position not searched) is left out, and so is the root, whose label
    is the game's outcome. AlphaZero's value learns from these beside the outcome: tens of labels a game instead of
    one a move."""
    below = [False] * len(tree.nodes)  # a solved end at or below the node
    exhausted = [False] * len(tree.nodes)  # every position below the node searched to an end
    for i in reversed(range(len(tree.nodes))):  # a child comes after its parent
        node = tree.nodes[i]
        below[i] = (node.terminal and node.info.get("terminal_value", 0.0) > 0) or any(below[c] for c in node.children)
        accepted = [tree.nodes[c].state.state for c in node.children if not tree.nodes[c].info["refused"]]
        exhausted[i] = node.terminal or (node.expanded and all(exhausted[c] for c in node.children) and
                                         every_position_reached(node.state.state, accepted))
    return {node.state.text: float(below[i]) for i, node in enumerate(tree.nodes)
            if i > 0 and node.expanded and not node.terminal and (below[i] or exhausted[i])}


@dataclass
class Game:
    problem: State
    moves: list[SearchedMove] = field(default_factory=list)
    end: Episode | None = None
    found: bool = False  # a solved state appeared anywhere in the game's searches (the exact final check)
    trees: list = field(default_factory=list)

    @property
    def solved(self) -> bool:
        return self.end is not None and self.end.solved


class SearchedGames(NamedTuple):
    games: list[Game]
    tokens: int  # characters the model generated for every search of every game
    value_evaluations: int  # states the value head judged (forward passes; 0 with the oracle)


def search_settings(settings: CountdownSearchSettings, simulations: int, temperature: float,
                    stop_at_win: bool = False) -> SearchSettings:
    # a search that stops at its first answer is a solver: it never re-enters a subtree searched to its ends
    return SearchSettings(num_simulations=simulations, max_depth=16, rule=settings.rule, c=settings.c,
                          q_transform=settings.q_transform, temperature=temperature, stop_at_win=stop_at_win,
                          skip_solved=stop_at_win, widen_after=settings.widen_after)


def play_searched(policy: Policy, problems: Sequence[State], settings: CountdownSearchSettings,
                  value: Value, rng: random.Random, *, simulations: int | None = None,
                  explore: bool, generator: torch.Generator | None = None, keep_trees: bool = False
                  ) -> SearchedGames:
    """Each problem played to its end, a search before every move (azlib.mcts.selfplay: all games in lock-step, one
    search call per move number); the first `exploratory_moves` moves (if `explore`) sampled by visit shares, the
    rest the most visited. Returns the games and what they cost."""
    env = LineSearch(policy, settings, value, generator)
    simulations = simulations or settings.simulations

    by_exploring = {exploring: search_settings(settings, simulations, 1.0 if exploring else 0.0)
                    for exploring in (True, False)}

    def searcher(_: int, state: Episode, move: int) -> tuple[LineSearch, SearchSettings]:
        return env, by_exploring[explore and move < settings.exploratory_moves]

    played = selfplay.play([Episode.start(p) for p in problems], searcher, rng, replay=keep_trees)
    games = []
    for problem, (moves, end) in zip(problems, played):
        game, labelled = Game(problem), set()  # the game's states already labelled by a search
        for state, result in moves:
            children = [result.tree.nodes[i] for i in result.tree.root.children]
            accepted = [(w, c.info["lines"]) for w, c in zip(result.action_weights, children) if not c.info["refused"]]
            # the search's target (visit shares; gumbel: the improved policy), renormalised over the accepted
            # children, a child's share spread over its merged lines by their priors (evenly where they underflow)
            total = sum(w for w, _ in accepted)
            lines = [(line, w / total * spread if total > 0 else 0.0)
                     for w, merged in accepted for (line, _), spread in zip(merged, shares(merged))]
            labels = tuple((text, z) for text, z in subtree_labels(result.tree).items() if text not in labelled)
            labelled.update(text for text, _ in labels)
            game.moves.append(SearchedMove(state.text, state.state, [line for line, _ in lines],
                                           [share for _, share in lines], result.action, labels))
            if keep_trees:
                game.trees.append(result.tree)
        game.end = end.copy()  # the caller's to play on; the one in the search's cache stays as it was
        game.found = game.solved or any(t.startswith(problem_text(problem)) for t in env.solved_found)
        games.append(game)
    return SearchedGames(games, env.tokens, env.value_evaluations)
