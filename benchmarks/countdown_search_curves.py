"""Where search can win on Countdown: 4-number problems, solve rate against the characters a model computes per
problem, best-of-k against the search over sampled lines (kept as first drawn, or widened as visits grow) and over
listed lines, each with no value, the self-play value, the oracle-labelled reference value and the exact oracle
(azlib.games.countdown.curves), a child per position its lines reach, and PUCT's widened and listed searches again
with a child per line; the value gate of each learned value; exact McNemar per problem at each budget, Holm over
all. One policy: the start by imitation, then the alphazero arm from it (its value head is the self-play value).
Goals and their measured outcome: docs/results.md.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/countdown_search_curves.py [--out outputs/bench-countdown-curves]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import torch  # noqa: E402

from azlib.games.countdown.arms import ProblemStream, reference_value, start_policy, train_arm  # noqa: E402
from azlib.games.countdown.curves import BUDGETS, CurveMethod, against_best_of, by_position, curves, rates  # noqa: E402
from azlib.games.countdown.evaluate import value_gate  # noqa: E402
from azlib.games.countdown.play import play_greedy  # noqa: E402
from azlib.games.countdown.policy import Policy, PolicyValueNet  # noqa: E402
from azlib.games.countdown.problems import heldout  # noqa: E402
from azlib.games.countdown.settings import (  # noqa: E402
    ArmSettings, CountdownSearchSettings, ImitationSettings, ReferenceValueSettings)
from azlib.settings import GPTShape  # noqa: E402
from azlib.viz.countdown import plot_curves  # noqa: E402

VALUES = ("none", "learned", "reference", "oracle")
# The search at test time: AlphaZero's one evaluation per simulation (the expanded leaf's, from the forward pass that
# scores its lines), an unvisited child valued at its parent's value (first-play urgency).
TEST_SEARCH = CountdownSearchSettings(child_values=False, q_transform="parent_value")


def methods(rules: list[str], widen_after: int) -> list[CurveMethod]:
    """Best-of-k, then per rule the search over sampled lines, over sampled lines widened (PUCT only), and over
    listed lines, each with every value (a child per position); last, PUCT's widened and listed searches with the
    self-play value and the oracle again with a child per line, each against its twin (`by_position`)."""
    out = [CurveMethod()]
    for rule in rules:
        searches = [("sampled", 0), ("listed", 0)]
        if widen_after and rule == "puct":  # Gumbel's sequential halving keeps the root lines it chose first
            searches.insert(1, ("sampled", widen_after))
        out += [CurveMethod(children, value, rule, widen) for children, widen in searches for value in VALUES]
    if "puct" in rules:
        out += [CurveMethod(children, value, "puct", widen, "line") for children, widen in
                [("sampled", widen_after), ("listed", 0)] for value in ("learned", "oracle")]
    return out


def _policy(state: dict) -> Policy:
    policy = Policy(PolicyValueNet())
    policy.net.load_state_dict(state)
    return policy


def _state(policy: Policy) -> dict:
    return {k: v.cpu() for k, v in policy.net.state_dict().items()}


def train_self_play(args) -> dict:
    """The start by imitation, then the alphazero arm from it: (start's state, trained state, history, minutes)."""
    torch.set_num_threads(1)
    started = time.perf_counter()
    if args.start is not None:  # a start this script's imitation wrote before (start.pt), at the same settings
        start = _policy(torch.load(args.start, weights_only=True))
    else:
        start, _ = start_policy(GPTShape(), ImitationSettings(problems=args.imitation_problems,
                                                                 steps=args.imitation_steps), args.size, args.seed)
    torch.save(_state(start), args.out / "start.pt")
    start_minutes = (time.perf_counter() - started) / 60
    run = train_arm("alphazero", start, ArmSettings(iterations=args.iterations), CountdownSearchSettings(),
                    ProblemStream(args.size, args.seed), args.seed)
    return {"start": _state(start), "trained": _state(run.policy), "history": run.history,
            "start_minutes": start_minutes, "minutes": (time.perf_counter() - started) / 60}


def train_reference(args) -> dict:
    torch.set_num_threads(1)
    started = time.perf_counter()
    net, history = reference_value(GPTShape(), ReferenceValueSettings(steps=args.reference_steps), args.size,
                                   args.seed)
    return {"state": _state(net), "history": history[::50], "minutes": (time.perf_counter() - started) / 60}


def trained_before(folder: Path) -> tuple[dict, dict]:
    """What train_self_play and train_reference returned in the run that wrote `folder`."""
    training = json.loads((folder / "summary.json").read_text())["training"]
    load = lambda name: torch.load(folder / name, weights_only=True)  # noqa: E731
    return ({"start": load("start.pt"), "trained": load("alphazero.pt"), "history": training["history"],
             "start_minutes": training["start_minutes"], "minutes": training["self_play_minutes"]},
            {"state": load("reference.pt"), "history": training["reference_history"],
             "minutes": training["reference_minutes"]})


def run_curves(args, policy_state: dict, reference_state: dict, chosen: list[CurveMethod]) -> dict:
    torch.set_num_threads(1)
    problems = list(heldout(args.size, "unseen"))[:args.problems]
    return curves(_policy(policy_state), problems, chosen, TEST_SEARCH, samples=args.samples,
                  simulations=args.simulations, seed=args.seed, reference=_policy(reference_state),
                  progress=lambda name: print(f"  {name}", flush=True))


def greedy_rate(policy: Policy, problems) -> float:
    return sum(e.solved for e in play_greedy(policy, problems)) / len(problems)


def shipped_form(summary: dict, result: dict) -> dict:
    """What benchmarks/results/countdown-curves ships: the summary without the training's histories, and each
    method's first answer and compute per problem (its solve rate at any budget follows; azlib.viz.plot_curves)."""
    training = {k: v for k, v in summary["training"].items() if not k.endswith("history")}
    methods = {name: {"first_answer": m["first_answer"], "spent": m["spent"], "generated": m["generated"],
                      "short": m["short"]} for name, m in result["methods"].items()}
    return summary | {"training": training, "curves": {"budgets": result["budgets"], "methods": methods}}


HEADLINE = ["best_of", "mcts sampled-widened puct learned", "mcts sampled-widened puct oracle"]


def save_figures(result: dict, size: int, problems: int, folder: Path) -> None:
    """Every method's curve (countdown-curves.png), and the headline: best-of-k against the widened search with the
    self-play value and with the oracle (countdown-search-headline.png)."""
    title = f"Countdown, {size} numbers, {problems} unseen-target problems"
    plot_curves(result, title).savefig(folder / "countdown-curves.png", dpi=90, bbox_inches="tight")  # its legend
    fig = plot_curves(result, title, methods=[m for m in HEADLINE if m in result["methods"]])
    fig.set_size_inches(7.5, 3.6)
    fig.axes[0].legend(fontsize=8, loc="upper left")
    fig.tight_layout()
    fig.savefig(folder / "countdown-search-headline.png", dpi=90)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("outputs/bench-countdown-curves"))
    parser.add_argument("--size", type=int, default=4)
    parser.add_argument("--problems", type=int, default=300, help="unseen-target problems (the shipped set's first)")
    parser.add_argument("--imitation-steps", type=int, default=1500)
    parser.add_argument("--imitation-problems", type=int, default=20000)
    parser.add_argument("--start", type=Path, help="a start.pt an earlier run wrote (skips the imitation)")
    parser.add_argument("--reference-steps", type=int, default=ReferenceValueSettings.steps)
    parser.add_argument("--iterations", type=int, default=10, help="the alphazero arm's (20,000 characters each)")
    parser.add_argument("--samples", type=int, default=160, help="best-of-k's samples per problem (k at most this)")
    parser.add_argument("--simulations", type=int, default=400, help="the search's at most, per problem")
    parser.add_argument("--rules", default="puct,gumbel")
    parser.add_argument("--widen-after", type=int, default=16,
                        help="also search sampled lines widened (PUCT): a node samples its candidates again each "
                             "time its visits grow by this; 0: not")
    parser.add_argument("--trained", type=Path,
                        help="a folder an earlier run wrote (start.pt, alphazero.pt, reference.pt, summary.json) "
                             "at the same settings: its nets and training record, no training")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--replot", type=Path, help="only draw the figures of a folder's metrics.json (a shipped one)")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    if args.replot is not None:
        shipped = json.loads((args.replot / "metrics.json").read_text())
        save_figures(shipped["curves"], shipped["setting"]["size"], shipped["setting"]["problems"], args.out)
        return
    started = time.perf_counter()
    spawn = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=2, mp_context=spawn) as pool:
        if args.trained is not None:
            self_play, reference = trained_before(args.trained)
            torch.save(self_play["start"], args.out / "start.pt")
        else:
            self_play, reference = pool.submit(train_self_play, args), pool.submit(train_reference, args)
            reference, self_play = reference.result(), self_play.result()
        print(f"trained at {time.perf_counter() - started:.0f} s", flush=True)
        torch.save(self_play["trained"], args.out / "alphazero.pt")
        torch.save(reference["state"], args.out / "reference.pt")
        chosen = methods(args.rules.split(","), args.widen_after)
        halves = [chosen[0::2], chosen[1::2]]
        parts = [pool.submit(run_curves, args, self_play["trained"], reference["state"], half) for half in halves]
        parts = [p.result() for p in parts]
    result = {"budgets": list(BUDGETS), "methods": {}}
    for method in chosen:  # in the order listed
        result["methods"][method.name] = next(p["methods"][method.name] for p in parts if method.name in p["methods"])
    result["tests"] = against_best_of(result)
    result["by_position"] = by_position(result)
    (args.out / "curves.json").write_text(json.dumps(result))  # first: what took longest is kept whatever follows
    problems = list(heldout(args.size, "unseen"))[:args.problems]
    torch.set_num_threads(2)
    trained, start, ref = _policy(self_play["trained"]), _policy(self_play["start"]), _policy(reference["state"])
    gates = {"self-play": value_gate(trained, problems, args.seed), "reference": value_gate(ref, problems, args.seed)}
    minutes = (time.perf_counter() - started) / 60
    setting = {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()}
    summary = {"setting": setting | {"test_search": vars(TEST_SEARCH)},
               "greedy_unseen": {"start": greedy_rate(start, problems), "alphazero": greedy_rate(trained, problems)},
               "value_gate": gates, "rates": rates(result), "tests": result["tests"],
               "by_position": result["by_position"],
               "spent_median": {n: sorted(m["spent"])[len(m["spent"]) // 2] for n, m in result["methods"].items()},
               "generated_median": {n: sorted(m["generated"])[len(m["generated"]) // 2]
                                    for n, m in result["methods"].items()},
               "training": {"start_minutes": self_play["start_minutes"], "self_play_minutes": self_play["minutes"],
                            "reference_minutes": reference["minutes"], "history": self_play["history"],
                            "reference_history": reference["history"]},
               "minutes": minutes}
    (args.out / "summary.json").write_text(json.dumps(summary, indent=1))
    (args.out / "metrics.json").write_text(json.dumps(shipped_form(summary, result), separators=(",", ":")))
    save_figures(result, args.size, args.problems, args.out)
    print(json.dumps({k: summary[k] for k in ("greedy_unseen", "value_gate", "rates", "spent_median",
                                              "generated_median")}, indent=1))
    for row in result["tests"]:
        print(f"{row['method']:32s} {row['budget']:5d}  best-of {row['best_of']:.3f}  search {row['rate']:.3f}  "
              f"diff {row['difference']:+.3f}  p_holm {row['p_holm']:.3g}")
    for row in result["by_position"]:
        print(f"{row['method']:32s} {row['budget']:5d}  a child per line {row['by_line']:.3f}  per position "
              f"{row['by_position']:.3f}  p_holm {row['p_holm']:.3g}")
    print(f"{minutes:.1f} min in all")


if __name__ == "__main__":
    main()
