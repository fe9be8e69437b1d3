"""The evaluation commands' records (`common/result_files.py`): written as JSON indented two spaces a level with each
list of plain values on one line, read back equal, and resumed."""

from __future__ import annotations

import json
import math

from tisa_hf.common.result_files import record_text, resumable_record, write_record


def test_a_record_keeps_each_list_of_plain_values_on_one_line():
    record = {
        "settings": {"queries": 3, "systems": ["bm25", "chunk:minilm"], "empty": {}, "none": []},
        "results": {"bm25": {"ranks": [1, 4, 2], "ndcg_at_10": 0.1 + 0.2, "hits": [True, False, None]}},
        "cells": [{"name": "qmsum"}, [0.5, -1e-07]],
    }
    assert record_text(record) == "\n".join(
        [
            "{",
            '  "settings": {',
            '    "queries": 3,',
            '    "systems": ["bm25", "chunk:minilm"],',
            '    "empty": {},',
            '    "none": []',
            "  },",
            '  "results": {',
            '    "bm25": {',
            '      "ranks": [1, 4, 2],',
            '      "ndcg_at_10": 0.30000000000000004,',
            '      "hits": [true, false, null]',
            "    }",
            "  },",
            '  "cells": [',
            "    {",
            '      "name": "qmsum"',
            "    },",
            "    [0.5, -1e-07]",
            "  ]",
            "}",
        ]
    )
    assert json.loads(record_text(record)) == record


def test_a_record_without_lists_of_plain_values_is_written_as_json_dumps_indents_it():
    record = {"settings": {"data": "qmsum", "max_tokens": 32768}, "paired": {"bm25": {"low": -0.5, "high": 1.25}}}
    assert record_text(record) == json.dumps(record, indent=2)


def test_a_written_record_reads_back_bit_for_bit_and_resumes(tmp_path):
    per_query = [math.pi * k / 7 for k in range(1000)]
    record = {"settings": {"queries": 1000}, "results": {"bm25": {"per_query": per_query}}}
    write_record(record, tmp_path / "out" / "run.json")
    assert resumable_record(tmp_path / "out" / "run.json", {"queries": 1000}, overwrite=False) == record
    assert len((tmp_path / "out" / "run.json").read_text().splitlines()) == 10
