"""The search tree: flat list of nodes with visit counts, value sums and priors; JSON in and out.
Data only: selection, expansion and backup are azlib.mcts.search's job."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, NamedTuple


@dataclass(slots=True)
class Node:
    """One state. `value_sum` is from the view of whoever chose the move into this node."""

    # What the environment needs, its own object (a board, a partial answer, a Countdown episode); Tree.save writes
    # it as JSON (a dataclass as a dict of its fields) and Tree.load reads it back through the game's `decode`.
    state: Any
    parent: int  # -1 for the root
    action: Any  # label of the edge from the parent (a move, a text chunk)
    prior: float
    depth: int
    visits: int = 0
    value_sum: float = 0.0
    children: list[int] = field(default_factory=list)
    expanded: bool = False
    terminal: bool = False
    solved: bool = False  # terminal, or every child solved: nothing left to learn below
    info: dict[str, Any] = field(default_factory=dict)  # environment extras (rewards, proposer, text)
    expanded_at: int = -1  # the simulation that expanded it (an index into Tree.history); -1: never expanded
    estimate: float | None = None  # the environment's value of it when made (azlib.mcts.search.Child.value)
    widen_at: int | None = None  # visits at which it draws more children (azlib.mcts.search widens); None: never

    @property
    def q(self) -> float:
        """The mean backed-up value; before any visit, the estimate made with the node (else 0)."""
        return self.value_sum / self.visits if self.visits else self.estimate or 0.0

    @property
    def known(self) -> bool:
        """Whether the node has a Q of its own: visited, or estimated when it was made."""
        return self.visits > 0 or self.estimate is not None


class Backup(NamedTuple):
    """What one simulation added: `visits` and `value` along `path` (root first); `value` is the sum of the values
    backed up, from the view of the player to move at path[-1] (azlib.mcts.search flips it up a two-player path)."""

    path: list[int]
    visits: int
    value: float


@dataclass
class Tree:
    nodes: list[Node]
    two_player: bool = False  # Q alternates perspective by depth (each node's Q is for the player who moved into it)
    settings: dict[str, Any] = field(default_factory=dict)  # the SearchSettings that grew it, as a dict; {}: not a search
    history: list[list[Backup]] = field(default_factory=list)  # per simulation, in order: its backups (a replay)

    @classmethod
    def with_root(cls, state: Any, **fields) -> Tree:
        return cls([Node(state=state, parent=-1, action=None, prior=1.0, depth=0)], **fields)

    @property
    def root(self) -> Node:
        return self.nodes[0]

    def add_child(self, parent: int, state: Any, action: Any, prior: float, **fields) -> int:
        self.nodes.append(Node(state=state, parent=parent, action=action, prior=prior,
                               depth=self.nodes[parent].depth + 1, **fields))
        self.nodes[parent].children.append(len(self.nodes) - 1)
        return len(self.nodes) - 1

    def leaves(self) -> list[int]:
        """Evaluated nodes none of whose children were: the ends of the paths the search walked."""
        return [i for i, n in enumerate(self.nodes)
                if n.visits > 0 and i > 0 and not any(self.nodes[c].visits for c in n.children)]

    def to_json(self) -> dict:
        return {"nodes": [asdict(n) for n in self.nodes], "two_player": self.two_player, "settings": self.settings,
                "history": [[list(b) for b in simulation] for simulation in self.history]}

    @classmethod
    def from_json(cls, data: dict, decode: Callable[[Any], Any] | None = None) -> Tree:
        """The tree `to_json` wrote, each node's state through `decode` (the game's reader of its JSON form)."""
        history = [[Backup(*b) for b in simulation] for simulation in data["history"]]
        nodes = [Node(**n) for n in data["nodes"]]
        if decode is not None:
            for node in nodes:
                node.state = decode(node.state)
        return cls(nodes, data["two_player"], data["settings"], history)

    def save(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(self.to_json()))

    @classmethod
    def load(cls, path: str | Path, decode: Callable[[Any], Any] | None = None) -> Tree:
        try:
            return cls.from_json(json.loads(Path(path).read_text()), decode)
        except KeyError as missing:
            raise ValueError(f"{path} is not a tree Tree.save wrote: it has no {missing}") from None
