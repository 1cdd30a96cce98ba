"""Sliders over notebook 01's prompt bandit: each change retrains one algorithm (azlib.bandit.train) and redraws
its curves. Draws and wires controls only; the training and every number shown are azlib.bandit's."""

from __future__ import annotations

import base64
import io
import time

import ipywidgets as widgets
import matplotlib.pyplot as plt
from IPython.display import display

from azlib import bandit
from azlib.viz.curves import plot_seed_curves
from azlib.viz.static import StillPicture

# Which knobs act on which algorithm: the clip and the epochs only where a batch is reused (PPO; with one pass the
# ratio is 1 and the clip never binds), the KL weight only in the GRPO variants.
ACTS_ON = {"clip_epsilon": ("PPO (clipped)",), "ppo_epochs": ("PPO (clipped)",),
           "beta": ("GRPO", "GRPO without std (Dr. GRPO)")}
METRICS = (("reward", "expected reward"), ("kl", "KL(pi || ref) [nats]"), ("entropy", "entropy [nats]"))


class BanditSliders(StillPicture, widgets.VBox):
    """The bandit's knobs as sliders; on release the chosen algorithm retrains (`num_seeds` runs) and its expected
    reward, KL and entropy are redrawn against sampled answers, dashed: the settings it started from. Knobs that
    do not act on the chosen algorithm are greyed out. `history` is the latest run's azlib.bandit.History."""

    def __init__(self, correct_answers: list[int], *, num_tokens: int, group_size: int, learning_rate: float,
                 clip_epsilon: float, beta: float, ppo_epochs: int, num_updates: int, num_seeds: int, seed: int,
                 baseline_rate: float = 0.1, algorithm: str = "GRPO"):
        self.correct_answers, self.num_seeds, self.seed, self.baseline_rate = correct_answers, num_seeds, seed, baseline_rate
        names = [a.name for a in bandit.standard_algorithms(beta, clip_epsilon, ppo_epochs)]
        style = {"description_width": "150px"}
        slider = {"continuous_update": False, "style": style}
        self.controls = {
            "algorithm": widgets.Dropdown(options=names, value=algorithm, description="algorithm", style=style),
            "group_size": widgets.IntSlider(group_size, min=2, max=max(32, group_size), description="G (group size)",
                                            **slider),
            "learning_rate": widgets.FloatLogSlider(learning_rate, base=10, min=-3, max=0.5, step=0.1,
                                                    description="learning rate", readout_format=".3g", **slider),
            "clip_epsilon": widgets.FloatSlider(clip_epsilon, min=0.05, max=max(0.5, clip_epsilon), step=0.05,
                                                description="clip epsilon", **slider),
            "ppo_epochs": widgets.IntSlider(ppo_epochs, min=1, max=max(8, ppo_epochs), description="PPO epochs",
                                            **slider),
            "beta": widgets.FloatSlider(beta, min=0.0, max=max(0.2, beta), step=0.005, description="beta (KL weight)",
                                        readout_format=".3f", **slider),
            "num_updates": widgets.IntSlider(num_updates, min=10, max=max(800, num_updates), step=10,
                                             description="updates", **slider),
            "num_tokens": widgets.IntSlider(num_tokens, min=max(correct_answers) + 1, max=max(16, num_tokens),
                                            description="tokens K (difficulty)", **slider),
        }
        self.status = widgets.HTML()
        self.output = widgets.Output()
        self.history: bandit.History | None = None
        self.start = self.settings()
        self.start_history: bandit.History | None = None
        for control in self.controls.values():
            control.layout.width = "420px"
            control.observe(lambda _change: self.rerun(), "value")
        super().__init__([widgets.HBox([widgets.VBox(list(self.controls.values())[:4]),
                                        widgets.VBox(list(self.controls.values())[4:])]),
                          self.status, self.output])
        self.rerun()

    def still(self) -> dict[str, str]:
        return {"image/png": self.picture}

    def settings(self) -> dict:
        return {name: control.value for name, control in self.controls.items()}

    def train(self, settings: dict) -> bandit.History:
        s = settings
        problem = bandit.Bandit.from_answers(self.correct_answers, s["num_tokens"])
        algorithm = next(a for a in bandit.standard_algorithms(s["beta"], s["clip_epsilon"], s["ppo_epochs"])
                         if a.name == s["algorithm"])
        return bandit.train(problem, algorithm, group_size=s["group_size"], num_updates=s["num_updates"],
                            learning_rate=s["learning_rate"], num_runs=self.num_seeds, seed=self.seed,
                            baseline_rate=self.baseline_rate)

    def rerun(self) -> None:
        """Train with the sliders' settings and redraw (what every slider's release does)."""
        s = self.settings()
        for name, algorithms in ACTS_ON.items():
            self.controls[name].disabled = s["algorithm"] not in algorithms
        self.status.value = "training..."
        started = time.perf_counter()
        self.history = self.train(s)
        if s == self.start:
            self.start_history = self.history
        h = self.history
        self.status.value = (f"{s['algorithm']}: final expected reward <b>{h.final('reward'):.3f}</b>, KL "
                             f"{h.final('kl'):.3f}, entropy {h.final('entropy'):.3f}; "
                             f"{h.samples_to_reach('reward', 0.9):.0f} sampled answers to reward 0.9; "
                             f"{self.num_seeds} seeds in {time.perf_counter() - started:.1f} s")
        figure = self.draw()
        picture = io.BytesIO()
        figure.savefig(picture, format="png", dpi=72)
        self.picture = base64.b64encode(picture.getvalue()).decode()
        with self.output:
            self.output.clear_output(wait=True)
            display(figure)
        plt.close(figure)

    def draw(self) -> plt.Figure:
        """The latest run's curves (mean +- std over seeds), the starting settings' dashed in grey."""
        s, h = self.settings(), self.history
        fig, axes = plt.subplots(1, 3, figsize=(15, 3.6))
        for ax, (metric, label) in zip(axes, METRICS):
            plot_seed_curves(ax, h.samples, {s["algorithm"]: h.metrics[metric]}, title=f"{label} vs sampled answers",
                             xlabel="sampled answers per run", ylabel=label)
            if self.start_history is not None and s != self.start:
                ax.plot(self.start_history.samples, self.start_history.metrics[metric].mean(1), "--", color="grey",
                        label=f"start: {self.start['algorithm']}")
        axes[0].set_ylim(-0.02, 1.02)
        axes[0].legend()
        fig.suptitle(f"Prompt bandit, G={s['group_size']}, K={s['num_tokens']}, lr={s['learning_rate']:.3g}, "
                     f"mean +- std over {self.num_seeds} seeds")
        fig.tight_layout()
        return fig
