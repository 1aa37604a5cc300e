"""A training run's plots, drawn from its folder's files (``metrics.jsonl``, ``rollouts.jsonl``) into
``<run>/plots/*.png``:

===========================  ====================================================================================
file                         what it shows
===========================  ====================================================================================
``reward_by_skill.png``      mean trajectory reward per skill over steps (``rollout/by_skill/<skill>/reward``)
``accuracy_by_skill.png``    share of correct trajectories per skill over steps (``rollout/by_skill/<skill>/accuracy``)
``eir_turns.png``            erroneous-turn rate (EIR, RS-Claw-Evolution) and mean assistant turns over steps
                             (``rollout/error_turn_rate``, ``rollout/mean_turns``)
``advantage_histogram.png``  histogram of the turns' advantages (each turn's value, ``rollouts.jsonl``), one
                             outline per step
``error_kinds_by_tool.png``  erroneous turns per tool, stacked by error kind (``parse_error``, ``schema_error``, …)
===========================  ====================================================================================

:func:`run_series` reads the values, :func:`figures` draws exactly those values (a test can read them back
from the figure's artists), :func:`write_run_plots` saves the PNGs. Both backends log the metric names
(:mod:`earthrl.rollout.step_accounting`); ``rollouts.jsonl`` is the local backend's.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

from earthrl.rewards.metrics.error_kinds import count_by_tool
from earthrl.rollout.run_logger import read_step_log

BY_SKILL = "rollout/by_skill/"


def run_series(run_dir: Path) -> dict:
    """The values every plot shows, from ``run_dir``'s files.

    Returns:
        ``{"steps": [int], "reward_by_skill" / "accuracy_by_skill": {skill: ([step], [value])},
        "eir": ([step], [value]), "turns": ([step], [value]), "advantages": {step: [turn advantage]}
        (turns without response tokens, advantage None, left out; faulted trajectories too),
        "error_kinds": {tool: {kind: erroneous turns}}}`` (faulted trajectories left out, as from every metric).
    """
    by_step = {int(m["step"]): m for m in read_step_log(run_dir / "metrics.jsonl") if "step" in m}
    steps = sorted(by_step)
    out: dict = {"steps": steps, "reward_by_skill": {}, "accuracy_by_skill": {}}
    for key in ("reward", "accuracy"):
        series = defaultdict(lambda: ([], []))
        for s in steps:
            for name, value in by_step[s].items():
                if name.startswith(BY_SKILL) and name.endswith("/" + key):
                    xs, ys = series[name[len(BY_SKILL):-len(key) - 1]]
                    xs.append(s)
                    ys.append(float(value))
        out[f"{key}_by_skill"] = dict(sorted(series.items()))
    for name, key in (("eir", "rollout/error_turn_rate"), ("turns", "rollout/mean_turns")):
        have = [s for s in steps if key in by_step[s]]
        out[name] = (have, [float(by_step[s][key]) for s in have])
    advantages: dict[int, list[float]] = defaultdict(list)
    turns = []
    for r in read_step_log(run_dir / "rollouts.jsonl"):
        if r.get("faulted"):
            continue
        turns += r.get("turns", [])
        for turn in r.get("turns", []):
            if turn.get("advantage") is not None:
                advantages[int(r["step"])].append(float(turn["advantage"]))
    out["advantages"] = dict(sorted(advantages.items()))
    out["error_kinds"] = count_by_tool(turns)  # the evaluation report's error_kinds count the same way
    return out


def figures(series: dict) -> dict:
    """One matplotlib ``Figure`` per plot (module table) of :func:`run_series`'s values, keyed by file stem;
    a plot without values (no per-skill metrics, no erroneous turn) is left out."""
    import matplotlib  # lazy: plotting only at the end of a run

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # lazy: see above
    from matplotlib.ticker import MaxNLocator  # lazy: see above

    steps = MaxNLocator(integer=True)  # optimizer steps are whole numbers (no 1.25 ticks)
    figs = {}
    for key, label in (("reward", "mean reward"), ("accuracy", "correct share")):
        skills = series[f"{key}_by_skill"]
        if not skills:
            continue
        fig, ax = plt.subplots(figsize=(6, 3.5))
        for skill, (xs, ys) in skills.items():
            ax.plot(xs, ys, marker="o", label=skill)
        ax.set_xlabel("step")
        ax.xaxis.set_major_locator(steps)
        ax.set_ylabel(label)
        ax.set_title(f"{label} per skill (training samples)")
        ax.legend(fontsize="small")
        fig.tight_layout()
        figs[f"{key}_by_skill"] = fig
    if series["eir"][0] or series["turns"][0]:
        fig, (ax_e, ax_t) = plt.subplots(1, 2, figsize=(8, 3.2))
        ax_e.plot(*series["eir"], marker="o", color="#c44e52")
        ax_e.set_title("erroneous-turn rate (EIR)")
        ax_t.plot(*series["turns"], marker="o", color="#4c72b0")
        ax_t.set_title("assistant turns per trajectory")
        for ax in (ax_e, ax_t):
            ax.set_xlabel("step")
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        fig.tight_layout()
        figs["eir_turns"] = fig
    if series["advantages"]:
        fig, ax = plt.subplots(figsize=(5, 3.5))
        for step, values in series["advantages"].items():
            ax.hist(values, bins=20, histtype="step", label=f"step {step}")
        ax.set_xlabel("turn advantage")
        ax.set_ylabel("turns")
        ax.set_title("Advantages per step")
        ax.legend(fontsize="small")
        fig.tight_layout()
        figs["advantage_histogram"] = fig
    if series["error_kinds"]:
        tools = list(series["error_kinds"])
        kinds = sorted({k for c in series["error_kinds"].values() for k in c})
        fig, ax = plt.subplots(figsize=(6, max(2.5, 0.4 * len(tools) + 1)))
        left = [0] * len(tools)
        for kind in kinds:
            counts = [series["error_kinds"][t].get(kind, 0) for t in tools]
            ax.barh(tools, counts, left=left, label=kind)
            left = [a + b for a, b in zip(left, counts)]
        ax.set_xlabel("erroneous turns")
        ax.set_title("Error kinds per tool")
        ax.legend(fontsize="small")
        fig.tight_layout()
        figs["error_kinds_by_tool"] = fig
    return figs


def write_run_plots(run_dir: Path) -> list[Path]:
    """Draw :func:`figures` of ``run_dir`` into ``run_dir/plots/<name>.png`` (100 dpi); returns the paths."""
    figs = figures(run_series(run_dir))
    import matplotlib.pyplot as plt  # lazy: figures() chose the Agg backend

    folder = run_dir / "plots"
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, fig in figs.items():
        paths.append(folder / f"{name}.png")
        fig.savefig(paths[-1], dpi=100)
        plt.close(fig)
    return paths
