import json
from pathlib import Path

import pytest

from tisa_hf.finetune.glue.data import load_glue
from tisa_hf.finetune.task_tables import get_task

SHARED_GLUE = Path(__file__).resolve().parents[2] / "shared" / "glue"


def test_cola_has_no_header_keeps_quotes_and_reads_a_last_line_without_newline(tmp_path):
    folder = tmp_path / "CoLA"
    folder.mkdir()
    (folder / "train.tsv").write_text('gj04\t1\t\tHe said "hi.\nbc01\t0\t*\tThe "quoted\' one.\n')
    (folder / "dev.tsv").write_text("gj04\t0\t*\tLast line.")
    data = load_glue(get_task("cola"), data_dir=str(tmp_path))
    assert data["train"]["sentence"] == ['He said "hi.', "The \"quoted' one."]
    assert data["train"]["label"] == [1, 0]
    assert data["validation"][0] == {"sentence": "Last line.", "label": 0}


def test_mrpc_header_with_bom(tmp_path):
    header = "\ufeffQuality\t#1 ID\t#2 ID\t#1 String\t#2 String\n"
    for name in ("train.tsv", "dev.tsv"):
        (tmp_path / name).write_text(header + '1\t1\t2\tA "b".\tA b.\n0\t3\t4\tC.\tD.\n', encoding="utf-8")
    data = load_glue(get_task("MRPC"), data_dir=str(tmp_path))
    assert data["validation"]["sentence1"] == ['A "b".', "C."]
    assert data["validation"]["label"] == [1, 0]


def test_mnli_has_both_dev_sets_and_named_labels(tmp_path):
    header = "index\tsentence1\tsentence2\tgold_label\n"
    (tmp_path / "train.tsv").write_text(header + "0\tp\th\tneutral\n1\tp2\th2\tcontradiction\n")
    (tmp_path / "dev_matched.tsv").write_text(header + "0\tm\tm\tentailment\n")
    (tmp_path / "dev_mismatched.tsv").write_text(header + "0\tx\tx\tcontradiction\n")
    data = load_glue(get_task("mnli"), data_dir=str(tmp_path))
    assert sorted(data) == ["train", "validation_matched", "validation_mismatched"]
    assert data["train"]["label"] == [1, 2]
    assert data["validation_mismatched"][0] == {"premise": "x", "hypothesis": "x", "label": 2}


def test_malformed_tsv_line_names_path_and_line(tmp_path):
    rows = "index\tsentence1\tsentence2\tlabel\n0\ta\tb\tentailment\n1\tonly two\n"
    (tmp_path / "train.tsv").write_text(rows)
    (tmp_path / "dev.tsv").write_text(rows)
    with pytest.raises(ValueError, match=rf"^{tmp_path / 'train.tsv'}:3: expected 4 tab-separated fields, found 2\.$"):
        load_glue(get_task("rte"), data_dir=str(tmp_path))


def test_unknown_label_names_path_and_line(tmp_path):
    rows = "index\tsentence1\tsentence2\tlabel\n0\ta\tb\tmaybe\n"
    (tmp_path / "train.tsv").write_text(rows)
    (tmp_path / "dev.tsv").write_text(rows)
    with pytest.raises(ValueError, match=r"train\.tsv:2: label 'maybe' is not one of entailment, not_entailment"):
        load_glue(get_task("rte"), data_dir=str(tmp_path))


def test_csv_files_with_string_labels(tmp_path):
    text = 'sentence1,sentence2,label,extra\n"A, b",c,entailment,x\nd,e,not_entailment,y\n'
    (tmp_path / "train.csv").write_text(text)
    (tmp_path / "dev.csv").write_text(text)
    data = load_glue(get_task("rte"), train_file=str(tmp_path / "train.csv"), validation_file=str(tmp_path / "dev.csv"))
    assert data["train"].column_names == ["sentence1", "sentence2", "label"]
    assert data["validation"]["sentence1"] == ["A, b", "d"]
    assert data["validation"]["label"] == [0, 1]


def test_json_lines_files_and_malformed_line(tmp_path):
    rows = [{"sentence": "good", "label": 1}, {"sentence": "bad", "label": 0}]
    (tmp_path / "train.jsonl").write_text("\n".join(json.dumps(row) for row in rows) + "\n")
    (tmp_path / "dev.jsonl").write_text(json.dumps(rows[0]) + "\n{broken\n")
    with pytest.raises(ValueError, match=rf"^{tmp_path / 'dev.jsonl'}:2: malformed JSON line"):
        load_glue(
            get_task("sst2"), train_file=str(tmp_path / "train.jsonl"), validation_file=str(tmp_path / "dev.jsonl")
        )
    (tmp_path / "dev.jsonl").write_text(json.dumps(rows[1]) + "\n")
    data = load_glue(
        get_task("sst2"), train_file=str(tmp_path / "train.jsonl"), validation_file=str(tmp_path / "dev.jsonl")
    )
    assert data["train"]["label"] == [1, 0]
    assert data["validation"][0] == rows[1]


def test_csv_row_with_wrong_field_count(tmp_path):
    (tmp_path / "train.csv").write_text("sentence,label\nok,1\nnot,ok,0\n")
    (tmp_path / "dev.csv").write_text("sentence,label\nok,1\n")
    with pytest.raises(ValueError, match=rf"^{tmp_path / 'train.csv'}:3: expected 2 fields, found 3\.$"):
        load_glue(get_task("sst2"), train_file=str(tmp_path / "train.csv"), validation_file=str(tmp_path / "dev.csv"))


def test_unknown_task_lists_the_tasks():
    with pytest.raises(ValueError, match="Unknown GLUE task 'squad'; choose from cola, sst2, mrpc, stsb, qqp, mnli"):
        get_task("squad")


@pytest.mark.skipif(not SHARED_GLUE.is_dir(), reason="the GLUE files of ../shared/glue are not present")
@pytest.mark.parametrize(
    ("task", "train_rows", "dev_rows"),
    [("rte", 2490, 277), ("mrpc", 3668, 408), ("cola", 8551, 1043), ("stsb", 5749, 1500), ("wnli", 635, 71)],
)
def test_real_glue_files_load_every_row(task, train_rows, dev_rows):
    data = load_glue(get_task(task), data_dir=str(SHARED_GLUE))
    assert (len(data["train"]), len(data["validation"])) == (train_rows, dev_rows)
