import json
from collections import Counter
from pathlib import Path

import pytest
from sklearn.model_selection import train_test_split
from transformers import HfArgumentParser

from tisa_hf.errors import UsageError
from tisa_hf.finetune.classify.data import load_documents
from tisa_hf.finetune.classify.files import Columns, read_documents
from tisa_hf.finetune.classify.folds import SplitsFile, fold_split
from tisa_hf.finetune.classify.hyperpartisan import corpus_files
from tisa_hf.finetune.classify.hyperpartisan import read_hyperpartisan as read_articles
from tisa_hf.finetune.classify.labels import LabelVocabulary
from tisa_hf.finetune.classify.options import DocumentDataArguments

HYPERPARTISAN = Path(__file__).resolve().parents[2] / "shared" / "longdoc" / "hyperpartisan"

ARTICLES = """<?xml version="1.0" encoding="UTF-8"?><articles>
\t<article id="a1" published-at="2017-09-10" title="Gold &amp;amp; Silver: a title">
Teaser before paragraphs <p>First  paragraph with <a href="x" type="external">a link</a> and
 a line break.</p> Between paragraphs <p>S&amp;amp;P 500 &amp;gt; 2,000 &#128591;</p>
<a type="internal"><p>Nested</p></a>
</article>
\t<article id="a2" title="Second">
<p>Only <q>quoted</q> text.</p></article>
</articles>
"""
GROUND_TRUTH = """<?xml version="1.0" ?>
<articles>
\t<article hyperpartisan="true" id="a1" labeled-by="article" url="u1"/>
\t<article hyperpartisan="false" id="a2" labeled-by="article" url="u2"/>
</articles>
"""


def write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def write_corpus(folder: Path, articles: str = ARTICLES, ground_truth: str = GROUND_TRUTH) -> tuple[Path, Path]:
    folder.mkdir(exist_ok=True)
    return write(folder / "articles-x.xml", articles), write(folder / "ground-truth-x.xml", ground_truth)


def test_articles_become_paragraphs_with_entities_decoded_title_first_and_labels_joined_by_id(tmp_path):
    articles, ground_truth = write_corpus(tmp_path)
    first, second = read_articles(articles, ground_truth)
    assert first.text == (
        "Teaser before paragraphs\n\nFirst paragraph with a link and a line break.\n\nBetween paragraphs\n\n"
        "S&P 500 > 2,000 \U0001f64f\n\nNested"
    )
    assert first.full_text == "Gold & Silver: a title\n\n" + first.text
    assert (first.id, first.label, first.where) == ("a1", "true", f"{articles}:2")
    assert (second.full_text, second.label, second.where) == ("Second\n\nOnly quoted text.", "false", f"{articles}:7")


def test_unlabelled_article_names_its_id_file_and_line(tmp_path):
    articles, ground_truth = write_corpus(tmp_path, ground_truth=GROUND_TRUTH.replace(' id="a2"', ' id="a3"'))
    with pytest.raises(UsageError) as caught:
        read_articles(articles, ground_truth)
    assert str(caught.value) == f"{articles}:7: article a2 has no label in {ground_truth}."


@pytest.mark.parametrize(
    ("articles", "ground_truth", "message"),
    [
        (ARTICLES.replace("</q>", ""), GROUND_TRUTH, "{articles}:8:26: malformed XML (mismatched tag)."),
        (ARTICLES.replace('<article id="a2"', "<article"), GROUND_TRUTH, "{articles}:7: <article> without an id."),
        (
            ARTICLES.replace("<p>Only <q>quoted</q> text.</p>", "<p> </p>"),
            GROUND_TRUTH,
            "{articles}:7: article a2 holds no text.",
        ),
        (
            ARTICLES.replace('id="a2"', 'id="a1"'),
            GROUND_TRUTH,
            "{articles}:7: article a1 appears twice (also on line 2).",
        ),
        (
            ARTICLES,
            GROUND_TRUTH.replace('hyperpartisan="false"', 'hyperpartisan="maybe"'),
            "{ground_truth}:4: article a2 has hyperpartisan='maybe'; expected one of true, false.",
        ),
    ],
    ids=["xml", "no-id", "no-text", "twice", "label"],
)
def test_malformed_articles_and_labels_are_named(tmp_path, articles, ground_truth, message):
    paths = write_corpus(tmp_path, articles, ground_truth)
    with pytest.raises(UsageError) as caught:
        read_articles(*paths)
    assert str(caught.value) == message.format(articles=paths[0], ground_truth=paths[1])


def test_csv_keeps_labels_as_strings_and_prepends_the_title(tmp_path):
    path = write(tmp_path / "docs.csv", 'heading,body,cls\nT1,"Long, long text",true\n,Untitled,01\n')
    documents = read_documents(path, Columns("body", "cls", "heading"))
    assert [(d.full_text, d.label, d.where) for d in documents] == [
        ("T1\n\nLong, long text", "true", f"{path}:2"),
        ("Untitled", "01", f"{path}:3"),
    ]


def test_json_lines_booleans_and_integers_are_class_names(tmp_path):
    rows = [{"text": "a", "label": True}, {"text": "b", "label": 0}, {"text": "c", "label": " left "}]
    path = write(tmp_path / "docs.jsonl", "\n".join(json.dumps(row) for row in rows) + "\n")
    assert [d.label for d in read_documents(path, Columns())] == ["true", "0", "left"]
    listed = write(tmp_path / "docs.json", json.dumps(rows))
    assert [d.label for d in read_documents(listed, Columns())] == ["true", "0", "left"]


def test_missing_label_column_names_the_file_and_its_columns(tmp_path):
    path = write(tmp_path / "docs.csv", "text,stance\nsome text,left\n")
    with pytest.raises(UsageError) as caught:
        read_documents(path, Columns())
    assert str(caught.value) == f"{path}:2: no column 'label' (--label-column); the columns are text, stance."


def test_empty_text_and_short_rows_are_named(tmp_path):
    with pytest.raises(UsageError, match=r"^.*docs\.csv:3: column 'text' holds no text\.$"):
        read_documents(write(tmp_path / "docs.csv", "text,label\na,x\n  ,y\n"), Columns())
    with pytest.raises(UsageError, match=r"^.*docs\.csv:2: expected 2 fields, found 1\.$"):
        read_documents(write(tmp_path / "docs.csv", "text,label\nonly\n"), Columns())


def test_label_vocabulary_orders_names_and_knows_the_positive_class():
    assert LabelVocabulary.build(["true", "false", "true"], "t") == LabelVocabulary(("false", "true"), "true")
    assert LabelVocabulary.build(["10", "2", "1"], "t") == LabelVocabulary(("1", "2", "10"), None)
    assert LabelVocabulary.build(["b", "a"], "t", positive="b").positive_id == 1
    assert LabelVocabulary.build(["x"], "t", names=["y", "x", "w"]) == LabelVocabulary(("y", "x", "w"), None)
    with pytest.raises(UsageError, match=r"^The classes are left and right: name the positive one .*--positive-label"):
        LabelVocabulary.build(["left", "right"], "t")
    with pytest.raises(UsageError, match=r"^t has label\(s\) z that --label-names \(x, y\) lacks\.$"):
        LabelVocabulary.build(["x", "z"], "t", names=["x", "y"])
    with pytest.raises(UsageError, match=r"^t has a single class \(x\)"):
        LabelVocabulary.build(["x", "x"], "t")


def test_files_become_splits_and_an_unseen_dev_label_is_named(tmp_path):
    write(tmp_path / "train.csv", "text,label\none,true\ntwo,false\nthree,true\n")
    write(tmp_path / "dev.csv", "text,label\nfour,false\n")
    write(tmp_path / "test.csv", "text,label\nfive,true\nsix,maybe\n")
    args = DocumentDataArguments(
        train_file=str(tmp_path / "train.csv"),
        validation_file=str(tmp_path / "dev.csv"),
        test_file=str(tmp_path / "test.csv"),
    )
    with pytest.raises(UsageError) as caught:
        load_documents(args)
    assert str(caught.value).startswith(f"{tmp_path / 'test.csv'}:3: label 'maybe' is not one of the training classes")
    write(tmp_path / "test.csv", "text,label\nfive,true\n")
    data = load_documents(args)
    assert data.labels == LabelVocabulary(("false", "true"), "true")
    assert data.splits["train"]["label"] == [1, 0, 1]
    assert data.splits["test"][0] == {"id": f"{tmp_path / 'test.csv'}:2", "text": "five", "label": 1}


def folds_corpus(tmp_path: Path, count: int = 40) -> tuple[Path, dict[str, str]]:
    """`count` articles, every third one hyperpartisan, in 5 folds by id modulo 5, and a fixed split."""
    ids = [f"{index:03d}" for index in range(count)]
    labels = {article_id: "true" if int(article_id) % 3 == 0 else "false" for article_id in ids}
    body = "".join(f'<article id="{article_id}" title="t"><p>text {article_id}</p></article>' for article_id in ids)
    truth = "".join(f'<article id="{i}" hyperpartisan="{label}"/>' for i, label in labels.items())
    write_corpus(tmp_path, f"<articles>{body}</articles>", f"<articles>{truth}</articles>")
    splits = {
        "split": {"train": ids[:30], "dev": ids[30:35], "test": ids[35:]},
        "folds": [[article_id for article_id in ids if int(article_id) % 5 == fold] for fold in range(5)],
    }
    write(tmp_path / "splits.json", json.dumps(splits))
    return tmp_path, labels


def test_fold_tests_on_its_fold_and_draws_a_stratified_dev_split_from_the_others(tmp_path):
    folder, labels = folds_corpus(tmp_path)
    data = load_documents(DocumentDataArguments(data_dir=str(folder), fold=2, dev_split_seed=7))
    splits = {split: data.splits[split]["id"] for split in data.splits}
    assert splits["test"] == [f"{index:03d}" for index in range(2, 40, 5)]
    pool = [f"{index:03d}" for fold in (0, 1, 3, 4) for index in range(fold, 40, 5)]
    _, expected_dev = train_test_split(pool, test_size=0.1, random_state=7, stratify=[labels[i] for i in pool])
    assert splits["validation"] == [i for i in pool if i in set(expected_dev)]
    assert splits["train"] == [i for i in pool if i not in set(expected_dev)]
    assert len(splits["validation"]) == 4 and set(Counter(labels[i] for i in splits["validation"])) == {"true", "false"}
    again = load_documents(DocumentDataArguments(data_dir=str(folder), fold=2, dev_split_seed=7))
    assert again.splits["validation"]["id"] == splits["validation"]
    assert data.splits["test"]["label"] == [int(labels[i] == "true") for i in splits["test"]]
    assert "fold 2 of 5" in data.description and "seed 7" in data.description


def test_fixed_split_is_the_file_s_and_a_fold_outside_the_file_is_named(tmp_path):
    folder, _ = folds_corpus(tmp_path)
    data = load_documents(DocumentDataArguments(data_dir=str(folder), split="fixed"))
    assert [data.splits[split]["id"][0] for split in ("train", "validation", "test")] == ["000", "030", "035"]
    assert [len(data.splits[split]) for split in ("train", "validation", "test")] == [30, 5, 5]
    with pytest.raises(UsageError) as caught:
        load_documents(DocumentDataArguments(data_dir=str(folder), fold=5))
    assert str(caught.value) == f"--fold 5: {folder / 'splits.json'} has 5 folds, numbered 0 to 4."


def test_splits_that_overlap_or_leave_out_documents_are_refused(tmp_path):
    folder, labels = folds_corpus(tmp_path)
    splits = SplitsFile.read(folder / "splits.json")
    overlapping = SplitsFile(splits.path, splits.fixed, [splits.folds[0] + ["001"], *splits.folds[1:]])
    with pytest.raises(UsageError, match=r"document 001 is in both fold 0 and fold 1\.$"):
        fold_split(overlapping, 0, labels, 0.1, 0)
    short = SplitsFile(splits.path, splits.fixed, splits.folds[:4])
    with pytest.raises(UsageError, match=r"the folds leave out 8 document\(s\) of the corpus \(first: 004\)"):
        fold_split(short, 0, labels, 0.1, 0)


def test_corpus_folder_needs_its_three_files(tmp_path):
    write_corpus(tmp_path)
    with pytest.raises(UsageError, match=r"has no file matching splits\.json; it takes a folder with one"):
        corpus_files(tmp_path)


def test_arguments_parse_from_the_command_line_and_refuse_conflicts():
    parser = HfArgumentParser(DocumentDataArguments)
    (args,) = parser.parse_args_into_dataclasses(
        args=["--train_file", "a.csv", "--validation_file", "b.csv", "--label_names", "x", "y", "--truncation",
              "head+tail", "--max_seq_length", "2048", "--title_column", "title"]
    )  # fmt: skip
    assert (args.label_names, args.truncation_plan().max_length, args.columns().title) == (["x", "y"], 2048, "title")
    with pytest.raises(UsageError, match=r"^--split fixed and --fold 1 exclude each other\.$"):
        DocumentDataArguments(data_dir="d", split="fixed", fold=1)
    with pytest.raises(UsageError, match=r"^--validation-file missing"):
        DocumentDataArguments(train_file="a.csv")
    with pytest.raises(UsageError, match=r"^--truncation 'tail' is not one of head, head\+tail\.$"):
        DocumentDataArguments(data_dir="d", truncation="tail")


@pytest.mark.skipif(not HYPERPARTISAN.is_dir(), reason="needs /work/shared/longdoc/hyperpartisan")
def test_real_hyperpartisan_articles_and_folds():
    articles, ground_truth, splits_path = corpus_files(HYPERPARTISAN)
    documents = read_articles(articles, ground_truth)
    assert len(documents) == 645
    assert Counter(document.label for document in documents)["true"] == 238
    labels = {document.id: document.label for document in documents}
    splits = SplitsFile.read(splits_path)
    assert [len(fold) for fold in splits.folds] == [130, 130, 129, 128, 128]
    for fold in range(5):
        plan = fold_split(splits, fold, labels, 0.1, 0).ids
        assert len(plan["test"]) == len(splits.folds[fold])
        assert sorted(plan["train"] + plan["validation"] + plan["test"]) == sorted(labels)
    fixed = load_documents(DocumentDataArguments(data_dir=str(HYPERPARTISAN)))
    assert [len(fixed.splits[split]) for split in ("train", "validation", "test")] == [515, 65, 65]
