"""AlphaZero's self-play for any game behind the Environment protocol: games to their ends in lock-step, a search
before each move, each move recorded with the search's target (mctx's `action_weights`). Not the update (learn.py)."""

from __future__ import annotations

import random
from typing import Any, Callable, NamedTuple, Sequence

from azlib.mcts.search import Environment, SearchResult, search
from azlib.settings import SearchSettings

# game index, its state, moves made so far in this loop -> the environment that searches it and how
Searcher = Callable[[int, Any, int], tuple[Environment, SearchSettings]]


class SearchedState(NamedTuple):
    """One move of a game: the state searched and the search's result (its action, target and tree)."""

    state: Any
    result: SearchResult


class PlayedGame(NamedTuple):
    moves: list[SearchedState]
    end: Any  # the terminal state


def chosen_state(result: SearchResult) -> Any:
    """The state the search's chosen action leads to: the root's child for that action."""
    tree = result.tree
    return tree.nodes[tree.root.children[result.actions.index(result.action)]].state


def play(starts: Sequence[Any], searcher: Searcher, rng: random.Random, replay: bool = False) -> list[PlayedGame]:
    """Each game from its start to a state its environment calls terminal, a search before every move; games
    searched in one call per (environment, settings) group, in the order of their first game. `replay` keeps each
    search's history (azlib.mcts.search)."""
    states = list(starts)
    moves: list[list[SearchedState]] = [[] for _ in states]
    made = 0
    while True:
        groups: dict[tuple[int, SearchSettings], tuple[Environment, list[int]]] = {}
        for g, state in enumerate(states):
            env, settings = searcher(g, state, made)
            if not env.is_terminal(state):
                groups.setdefault((id(env), settings), (env, []))[1].append(g)
        if not groups:
            return [PlayedGame(m, s) for m, s in zip(moves, states)]
        for (_, settings), (env, games) in groups.items():
            for g, result in zip(games, search(env, [states[g] for g in games], settings, rng, replay=replay)):
                moves[g].append(SearchedState(states[g], result))
                states[g] = chosen_state(result)
        made += 1
