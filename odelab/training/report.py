"""``odelab reproduce --report``: every ``OUT/TASK.json`` of ``odelab reproduce`` as one markdown report (a table
per task and task reading: ours mean ± std over seeds, epochs against the paper's, device, the paper's value,
the trivial baselines, who wins) and one figure per task; optionally written into a README between markers, so
that no number of the reproduction section is typed by hand."""
from __future__ import annotations

import json
from pathlib import Path

from .reproduce import TABLES, option_key

BEGIN, END = "<!-- reproduce-report:begin -->", "<!-- reproduce-report:end -->"
MODEL_NAMES = {"lem": "LEM", "lem-official": "LEM (official biases)", "lem-single": "LEM w/o multi-scale", "cornn": "coRNN", "cornn-official": "coRNN (official readout init)",
               "cornn-searched": "coRNN (searched)", "lstm": "LSTM", "gru": "GRU",
               "rnn": "tanh RNN", "taugru": "τ-GRU", "delaygru": "Delay GRU", "lrcu-a": "LRCU-A", "lrcu-s": "LRCU-S",
               "unicornn": "UnICORNN", "node": "MLP neural ODE (dopri5)", "ltc": "LTC", "stc": "STC",
               "lrc-ode-a": "LRC neural ODE (A)", "lrc-ode-s": "LRC neural ODE (S)", "mgu": "MGU", "gru-ode": "GRU-ODE",
               "oscillator": "neural oscillator"}


def load_tables(folder: Path) -> dict[str, dict]:
    """``{task: table}`` of every ``TASK.json`` in ``folder`` whose task has a paper table, in TABLES' order."""
    found = {}
    for task in TABLES:
        path = folder / f"{task}.json"
        if path.exists():
            found[task] = json.loads(path.read_text())
    return found


def protocol(row: dict) -> str:
    label = {"paper": "paper", "quick": "SHORTENED: quick preset",
             "small": "SHORTENED: small preset (our CPU protocol, see the note)",
             "paper-clip": "paper preset + gradient-norm clip 1.0"}.get(row["preset"],
                                                                                  f"preset {row['preset']}")
    preset_epochs = row.get("paper_epochs", row["epochs"])
    if row["epochs"] < preset_epochs:
        label += f", SHORTENED: {row['epochs']} of {preset_epochs} epochs"
    elif row["epochs"] > preset_epochs:
        label += f", extended: {row['epochs']} epochs (the preset: {preset_epochs})"
    return label


def _groups(rows: list[dict]) -> dict[tuple, list[dict]]:
    """Rows by (task options, preset, epochs): the rows one can rank against each other."""
    groups: dict[tuple, list[dict]] = {}
    for row in rows:
        groups.setdefault((option_key(row.get("options", {})), row["preset"], row["epochs"]), []).append(row)
    return groups


def _fmt(value: float | None) -> str:
    return "—" if value is None else f"{value:.3g}"


def winner(task: str, rows: list[dict]) -> dict:
    table = TABLES[task]
    return (max if table.higher_is_better else min)(rows, key=lambda r: r["ours"])


def best_seed(table, row: dict) -> float | None:
    """The best seed's value of a row (the highest accuracy, else the lowest error): the statistic some papers
    report as their headline (the τ-GRU paper's tables are maxima over 8 seeds, its Table 11)."""
    values = row.get("values") or []
    return (max if table.higher_is_better else min)(values) if values else None


def task_section(task: str, data: dict, figure: str | None) -> list[str]:
    table = TABLES[task]
    unit = f" {table.unit}" if table.unit else ""
    lines = [f"### {task}: test {table.metric}{unit} ({'higher' if table.higher_is_better else 'lower'} is better)", "",
             f"Paper: {table.source}." + (f" Note: {table.note}." if table.note else ""), ""]
    order = {m: i for i, m in enumerate(table.models)}
    for (column, preset, epochs), rows in _groups(data["rows"]).items():
        rows = sorted(rows, key=lambda r: (order.get(r["model"], len(order)), r["model"]))
        best = winner(task, rows)
        reading = f"task option {column}" if column else "task defaults"
        if table.metric_for(column) != table.metric:
            reading += f" (test {table.metric_for(column)}{unit}, the paper's reading)"
        lines += [f"**{reading}; {protocol(rows[0])}**", "",
                  "| model | ours (mean ± std) | best seed | seeds | epochs | device | paper | parameters |",
                  "| --- | --- | --- | --- | --- | --- | --- | --- |"]
        for r in rows:
            ours = f"{r['ours']:.3g} ± {r['std']:.2g}"
            if r is best:
                ours = f"**{ours}** (best)"
            paper = _fmt(r.get("paper")) + (f" ± {r['paper_std']:.2g}" if r.get("paper_std") is not None else "")
            lines.append(f"| {MODEL_NAMES.get(r['model'], r['model'])} | {ours} | {_fmt(best_seed(table, r))} | "
                         f"{len(r['seeds'])} | {r['epochs']} | {r.get('device', 'cpu')} | {paper} | {r['parameters']} |")
        for name, value in (rows[0].get("baselines") or {}).items():
            lines.append(f"| baseline: {name} | {value:.3g} | | | | | | |")
        lines.append("")
        claimed = table.winner
        if claimed is not None:
            ran = {r["model"] for r in rows}
            if claimed not in ran:
                verdict = f"the paper's winner ({MODEL_NAMES.get(claimed, claimed)}) was not run in this protocol"
            elif best["model"] == claimed:
                verdict = f"the paper's winner, {MODEL_NAMES.get(claimed, claimed)}, wins here too"
            else:
                verdict = (f"the paper's winner is {MODEL_NAMES.get(claimed, claimed)}; here "
                           f"{MODEL_NAMES.get(best['model'], best['model'])} wins")
            lines += [f"Who wins: {verdict}.", ""]
    if figure:
        lines += [f"![{task}: ours (mean ± std over seeds, each seed a dot) and the paper's values]({figure})", ""]
    return lines


PANELS_PER_ROW = 4


def plot_task(task: str, data: dict, path: Path) -> None:
    """One panel per (task options, preset, epochs), at most PANELS_PER_ROW to a row: our mean ± std per model as
    bars with each seed's value as a dot, the paper's as markers."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    table = TABLES[task]
    groups = _groups(data["rows"])
    columns = min(len(groups), PANELS_PER_ROW)
    lines = -(-len(groups) // columns)
    fig, axes = plt.subplots(lines, columns, figsize=(4.5 * columns, 3.6 * lines), squeeze=False)
    for ax in axes.flat[len(groups):]:
        ax.set_visible(False)
    for ax, ((column, preset, epochs), rows) in zip(axes.flat, groups.items()):
        names = [MODEL_NAMES.get(r["model"], r["model"]) for r in rows]
        x = range(len(rows))
        means, stds = [r["ours"] for r in rows], [r["std"] for r in rows]
        below = [min(s, m) if m >= 0 else s for m, s in zip(means, stds)]  # a nonnegative metric's bar stops at 0
        ax.bar(x, means, yerr=[below, stds], capsize=3, color="tab:blue", label="ours")
        seeds = [(i, v) for i, r in enumerate(rows) for v in r.get("values", ())]
        if seeds:
            ax.plot(*zip(*seeds), "o", color="black", markersize=3, label="seeds")
        papers = [(i, r["paper"]) for i, r in enumerate(rows) if r.get("paper") is not None]
        if papers:
            ax.plot(*zip(*papers), "D", color="tab:red", label="paper")
        values = [r["ours"] for r in rows] + [p for _, p in papers]
        if not table.higher_is_better and min(values) > 0 and max(values) / min(values) > 30:
            ax.set_yscale("log")
        ax.set_xticks(list(x), names, rotation=35, ha="right", fontsize=8)
        ax.set_ylabel(f"{table.metric_for(column)} {table.unit}".strip())
        ax.set_title(f"{task}" + (f" ({column})" if column else "") + f", {preset}, {epochs} ep.", fontsize=9)
        ax.legend(fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def report(folder: str | Path = "runs/reproduce", figures: str | Path | None = None,
           readme: str | Path | None = None) -> str:
    """The markdown report of every table in ``folder`` (written to ``folder/REPORT.md``), figures in ``figures``
    (default ``folder/figures``); with ``readme``, the text between its markers is replaced by the report (figure
    links relative to the README)."""
    folder = Path(folder)
    tables = load_tables(folder)
    if not tables:
        raise FileNotFoundError(f"no reproduction tables (TASK.json from `odelab reproduce TASK`) in {folder}")
    figures = Path(figures) if figures is not None else folder / "figures"
    for task, data in tables.items():
        plot_task(task, data, figures / f"{task}.png")

    def text(base: Path) -> str:  # figure links relative to the file that shows them
        lines = ["Generated by `odelab reproduce --report` from the runs' results (test metric on all test sequences; "
                 "mean ± sample std over seeds). SHORTENED marks a shorter protocol than the paper's.", ""]
        for task, data in tables.items():
            lines += task_section(task, data, _relative(figures / f"{task}.png", base))
        return "\n".join(lines)

    (folder / "REPORT.md").write_text(text(folder) + "\n")
    if readme is not None:
        _replace_section(Path(readme), text(Path(readme).parent))
    return text(folder)


def _relative(path: Path, base: Path) -> str:
    try:
        return str(path.resolve().relative_to(base.resolve()))
    except ValueError:
        return str(path.resolve())


def _replace_section(readme: Path, text: str) -> None:
    content = readme.read_text()
    if BEGIN not in content or END not in content or content.index(BEGIN) > content.index(END):
        raise ValueError(f"{readme}: no section between {BEGIN} and {END} to replace")
    head, rest = content.split(BEGIN, 1)
    tail = rest.split(END, 1)[1]
    readme.write_text(f"{head}{BEGIN}\n{text}\n{END}{tail}")
