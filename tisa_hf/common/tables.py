"""Markdown tables and their cells: a row per model and a column per length (`lm-eval`, `longembed`), and the paired
differences of `tisa-hf report`."""

from __future__ import annotations

from typing import Any


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


def seed_paired_cell(entry: dict[str, Any]) -> str:
    """A paired difference over seeds in points as `mean [low, high]* (seeds)`, * where the interval excludes 0."""
    star = "*" if entry["excludes_zero"] else ""
    bounds = f"[{points(entry['low'])}, {points(entry['high'])}]"
    return f"{points(entry['mean'])} {bounds}{star} ({len(entry['seeds'])})"


def points(value: float) -> str:
    """A difference in points to one decimal, or to its first significant digit where one decimal would print
    ±0.0: a bound of -0.009 decides the star, and "-0.0]*" would hide why."""
    text = f"{value:+.1f}"
    return f"{value:+.1g}" if value != 0 and float(text) == 0 else text
