"""Retrieval measures over groups of queries cut by one number per query: where the passage starts in its article
(`tisa-hf spans`), or how long the query's meeting is (`tisa-hf qmsum`). Long reading gains or loses in some groups
more than in others, which the means over all queries hide."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ...common.tables import markdown_table
from .ranking import MEASURE_LABELS, per_query

GROUP_MEASURES = ("acc_at_1", "ndcg_at_10")
Groups = dict[str, Any]  # group name -> its number of queries and every system's measures there


def group_name(start: int, stop: int | None, unit: str) -> str:
    return f"{start:,}+ {unit}" if stop is None else f"{start:,}-{stop:,} {unit}"


def by_group(record: dict[str, Any], values: Sequence[int], starts: Sequence[int], unit: str) -> Groups:
    """Per group [starts[k], starts[k + 1]) of the queries' `values` (the last open-ended; empty groups left out),
    its number of queries and every system's mean of each of `GROUP_MEASURES` there."""
    array = np.asarray(values)
    edges = [*starts, None]
    groups = {}
    for start, stop in zip(edges[:-1], edges[1:], strict=True):
        inside = (array >= start) & (array < (stop if stop is not None else np.inf))
        if not inside.any():
            continue
        groups[group_name(start, stop, unit)] = {
            "queries": int(inside.sum()),
            "systems": {
                name: {
                    measure: float(np.mean(np.asarray(per_query(measure, result["ranks"]))[inside]))
                    for measure in GROUP_MEASURES
                }
                for name, result in record["results"].items()
            },
        }
    return groups


def group_tables(groups: Groups, grouped_by: str) -> str:
    """Markdown: a table per measure, a row per system and a column per group; `grouped_by` ends each title."""
    sections = []
    columns = [f"{name} ({group['queries']})" for name, group in groups.items()]
    systems = next(iter(groups.values()))["systems"] if groups else {}
    for measure in GROUP_MEASURES:
        rows = {
            system: [f"{100 * group['systems'][system][measure]:.1f}" for group in groups.values()]
            for system in systems
        }
        title = f"{MEASURE_LABELS[measure]} x100 by {grouped_by} (queries)"
        sections.append(f"{title}:\n\n{markdown_table(columns, rows, 'system')}")
    return "\n\n".join(sections) + "\n"
