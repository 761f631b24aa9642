"""The lateness plot: one cumulative distribution per variant (matplotlib, Agg backend)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bench.report import aggregate, row_label

__all__ = ["plot_lateness"]

_STYLES = {
    "herdsched-mem": ("tab:blue", "--"),
    "herdsched-yaml": ("tab:blue", "-"),
    "aps-mem": ("tab:orange", "--"),
    "aps-sqlite": ("tab:orange", "-"),
    "schedule": ("tab:green", ":"),
}


def plot_lateness(
    lateness: dict[str, list[dict[str, Any]]], path: Path, subtitle: str = ""
) -> Path:
    """Draw the lateness CDF of every variant (log time axis) into a PNG at ``path``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(8, 4.8), dpi=120)
    drawn = 0
    for key, runs in lateness.items():
        row = aggregate(runs)
        points = [max(p, 0.01) for p in row.get("quantiles_ms", [])]
        if not points:
            continue
        fractions = [
            100 * i / (len(points) - 1) if len(points) > 1 else 100 for i in range(len(points))
        ]
        color, style = _STYLES.get(key, (None, "-"))
        label = f"{row_label(key)} (p99 {row['p99_ms']:.1f} ms)"
        axes.plot(points, fractions, linestyle=style, color=color, label=label, linewidth=1.6)
        drawn += 1
    if not drawn:
        raise ValueError("no lateness samples to plot")
    axes.set_xscale("log")
    axes.set_xlabel("lateness: job start − due time (ms, log scale)")
    axes.set_ylabel("percent of runs")
    axes.axhline(99, color="grey", linewidth=0.8, linestyle=":")
    axes.text(axes.get_xlim()[0], 99.5, " p99", color="grey", fontsize=8, va="bottom")
    axes.set_ylim(0, 101)
    title = "Firing lateness, 1,000 schedules every second"
    axes.set_title(f"{title}\n{subtitle}" if subtitle else title, fontsize=10)
    axes.grid(True, which="both", alpha=0.3)
    axes.legend(fontsize=8, loc="lower right")
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path)
    plt.close(figure)
    return path
