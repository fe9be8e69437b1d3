"""Markdown tables of the evaluation commands (`lm-eval`, `longembed`): a row per model, a column per length."""

from __future__ import annotations


def markdown_table(columns: list[str], rows: dict[str, list[str]], first: str = "model") -> str:
    """A table with a row per `rows` entry (its name, then its cells) under the header `first | columns...`."""
    header = [f"| {first} | {' | '.join(columns)} |", f"|---|{'---:|' * len(columns)}"]
    return "\n".join(header + [f"| {name} | {' | '.join(cells)} |" for name, cells in rows.items()])


def paired_cell(entry: dict[str, float | None] | None, decimals: int) -> str:
    """A paired difference as `+d [low, high]`, * where the interval excludes 0; "–" where there is none."""
    if entry is None:
        return "–"
    difference = f"{entry['difference']:+.{decimals}f}"
    if entry["low"] is None:
        return difference
    excludes_zero = entry["low"] > 0 or entry["high"] < 0
    return f"{difference} [{entry['low']:+.{decimals}f}, {entry['high']:+.{decimals}f}]{'*' if excludes_zero else ''}"
