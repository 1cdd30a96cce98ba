"""Step checks as verifiers of whole answers: precision and recall per chain length, with the 90% bar
(azlib.step_check_precision computes the tables)."""

from __future__ import annotations

import matplotlib.pyplot as plt

from azlib.step_check_precision import ANSWER_CHECKS

PRECISION_BAR = 0.9  # Chen et al. (ACL 2024): a discriminator must be right about this often for search to pay


def plot_step_checks(tables: dict[str, list[dict]], label: str = ""):
    """One panel per set of answers (name -> azlib.step_check_precision.precision_table rows): each check's precision
    (solid) and recall (dotted) against the chain length, 95% Wilson intervals, the bar dashed; each line's points
    are set a little apart on the x axis, so that equal values stay visible. `label` says where the answers came
    from."""
    fig, axes = plt.subplots(1, len(tables), figsize=(5 * len(tables), 3.8), sharey=True, squeeze=False)
    for ax, (name, table) in zip(axes[0], tables.items()):
        lengths = sorted({r["steps"] for r in table if r["steps"] != "all"})
        for k, (check, colour) in enumerate(zip(ANSWER_CHECKS, ("C0", "C1", "C2", "C3"))):
            for j, (key, style) in enumerate((("precision", "-o"), ("recall", ":s"))):
                offset = 0.025 * (2 * k + j - len(ANSWER_CHECKS) + 0.5)
                cells = [r for s in lengths for r in table if r["steps"] == s and r["check"] == check
                         and r[key] is not None]
                ys = [r[key] for r in cells]
                errors = [[y - r[f"{key}_ci"][0] for y, r in zip(ys, cells)],
                          [r[f"{key}_ci"][1] - y for y, r in zip(ys, cells)]]
                ax.errorbar([r["steps"] + offset for r in cells], ys, yerr=errors, fmt=style, color=colour, capsize=3,
                            label=f"{check} {key}")
        ax.axhline(PRECISION_BAR, color="grey", lw=0.8, ls="--")
        ax.set(title=name, xlabel="chain length (steps)", xticks=lengths, ylim=(0, 1.02))
    axes[0][0].set_ylabel("share of answers (95% Wilson CI)")
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, fontsize=7, loc="lower center", ncol=len(ANSWER_CHECKS), bbox_to_anchor=(0.5, 0.03))
    fig.suptitle("Step checks as verifiers of whole answers: precision and recall (dashed: the 90% bar)", fontsize=10)
    if label:
        fig.text(0.01, 0.005, label, fontsize=6)
    fig.tight_layout(rect=(0, 0.16, 1, 1))
    return fig
