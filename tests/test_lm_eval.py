"""`tisa-hf lm-eval` against direct computations, and linear position interpolation."""

import copy
import json
import logging

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from PIL import Image
from transformers import AutoModel, AutoModelForMaskedLM, AutoTokenizer

import tisa_hf
from tests.fixtures import tiny_config, write_tiny_model, write_wikitext
from tisa_hf.adapt import lm_eval
from tisa_hf.commands.cli import entry
from tisa_hf.common.long_inputs import PositionInterpolation, interpolated_rows
from tisa_hf.common.result_files import PROGRESS_FILE
from tisa_hf.common.text import mask_blocks, pack_blocks, read_articles, spread_selection, tokenize_articles
from tisa_hf.errors import UsageError

lm_eval_main = entry("lm-eval")  # `tisa-hf lm-eval`

TABLE = 16
LENGTHS = [8, 16, 64]  # 64 is 4x the table
MAX_TOKENS = 320  # 40, 20 and 5 blocks


def test_interpolation_at_scale_one_is_the_original_model(model_type):
    model = AutoModel.from_config(tiny_config(model_type)).eval()
    original = copy.deepcopy(model)
    interpolation = PositionInterpolation(model)
    table = interpolation.table_length
    input_ids = torch.randint(5, 99, (2, table))
    with torch.no_grad():
        for length in (table // 2, table):
            stretched = interpolation.stretch_to(length)
            expected = original(input_ids[:, :length]).last_hidden_state
            assert torch.equal(stretched(input_ids[:, :length]).last_hidden_state, expected)
        assert torch.equal(
            stretched.embeddings.position_embeddings.weight, original.embeddings.position_embeddings.weight
        )
        longer = interpolation.stretch_to(2 * table)(torch.randint(5, 99, (2, 2 * table))).last_hidden_state
    assert longer.shape == (2, 2 * table, model.config.hidden_size) and torch.isfinite(longer).all()


def test_interpolated_rows_follow_position_interpolation():
    table = torch.randn(8, 3)
    rows = interpolated_rows(table, 16)  # scale 2: position p reads the table at p / 2
    assert torch.equal(rows[0::2], table)
    assert torch.allclose(rows[1:-1:2], (table[:-1] + table[1:]) / 2)
    assert torch.equal(rows[-1], table[-1])  # 7.5: past the last row, which is held
    assert torch.equal(interpolated_rows(table, 5), table)  # never shrunk
    assert torch.allclose(interpolated_rows(table, 12)[3], table[2])  # 3 * 8 / 12 = 2


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("lm_eval")
    teacher = write_tiny_model(root / "teacher", masked_lm=True, positions=TABLE)
    torch.manual_seed(1)
    tisa = tisa_hf.TisaConfig(num_kernels=2, mode="replace", init="random")
    AutoModelForMaskedLM.from_pretrained(teacher, tisa=tisa).save_pretrained(root / "student")
    AutoModel.from_pretrained(teacher, tisa=tisa).save_pretrained(root / "student-encoder")
    write_wikitext(root / "test.txt", articles=4)
    return root


def evaluate(models, out, *specs, extra=(), status=0):
    """`tisa-hf lm-eval`'s record, where it finishes; `status` 130 for a run interrupted by Ctrl-C."""
    argv = [*specs, "--teacher", str(models / "teacher"), "--text", str(models / "test.txt"), "--out", str(out)]
    argv += ["--lengths", *map(str, LENGTHS), "--max-tokens", str(MAX_TOKENS), "--batch-tokens", "100", *extra]
    assert lm_eval_main(argv) == status
    return json.loads((out / lm_eval.RESULTS_FILE).read_text()) if status == 0 else None


def blocks_and_masks(models, length):
    """The evaluation's blocks and masks, rebuilt from the text functions."""
    tokenizer = AutoTokenizer.from_pretrained(models / "teacher")
    documents = tokenize_articles(read_articles(models / "test.txt"), tokenizer)
    blocks = spread_selection(pack_blocks(documents, length, tokenizer), MAX_TOKENS // length)
    return blocks, *mask_blocks(blocks, tokenizer, 0.15, seed=0)


@torch.no_grad()
def direct_numbers(model, teacher, models, length, head_model=None):
    """Agreement and full-logit masked-LM loss computed block by block with plain transformers calls."""
    blocks, masked, labels = blocks_and_masks(models, length)
    agreement = None
    if length <= TABLE:
        states = model.base_model(blocks).last_hidden_state
        agreement = F.cosine_similarity(states, teacher.base_model(blocks).last_hidden_state, dim=-1).mean().item()
    total, count = 0.0, 0
    for ids, target in zip(masked, labels, strict=True):
        masked_count = int((target != -100).sum())
        if not masked_count:  # a short block may have no masked token (its mean loss is NaN)
            continue
        if head_model is None:
            loss = model(input_ids=ids[None], labels=target[None]).loss
        else:
            logits = head_model.cls(model(ids[None]).last_hidden_state)
            loss = F.cross_entropy(logits[0], target)
        total += loss.item() * masked_count
        count += masked_count
    return agreement, total / count


def test_numbers_at_four_times_the_table_match_a_direct_computation(models, tmp_path):
    student, teacher = str(models / "student"), str(models / "teacher")
    record = evaluate(models, tmp_path / "out", student, teacher, f"interp:{teacher}")
    assert record["lengths"] == LENGTHS and record["teacher_table_length"] == TABLE
    assert record["blocks"] == {"8": 40, "16": 20, "64": 5}
    assert record["wall_time_s"] > 0 and record["machine"]["device"] == "cpu"
    student_model = AutoModelForMaskedLM.from_pretrained(student).eval()
    teacher_model = AutoModelForMaskedLM.from_pretrained(teacher).eval()
    measured = record["models"][student]
    for length in LENGTHS:
        agreement, loss = direct_numbers(student_model, teacher_model, models, length)
        assert measured["agreement"][str(length)] == (None if agreement is None else pytest.approx(agreement, rel=1e-5))
        assert measured["mlm_loss"][str(length)] == pytest.approx(loss, rel=1e-5)
    assert 0 < measured["agreement"]["16"] < 1
    original, interpolated = record["models"][teacher], record["models"][f"interp:{teacher}"]
    assert original["agreement"] == {"8": pytest.approx(1.0), "16": pytest.approx(1.0), "64": None}
    assert original["mlm_loss"]["64"] is None  # a 16-position table cannot read 64 tokens
    for measure in ("agreement", "mlm_loss"):  # scale 1: exactly the original model
        assert [interpolated[measure][key] for key in ("8", "16")] == [original[measure][key] for key in ("8", "16")]
    assert interpolated["mlm_loss"]["64"] > 0 and interpolated["interpolated"]
    with Image.open(tmp_path / "out" / lm_eval.PLOT_FILE) as image:
        assert image.format == "PNG" and image.width > 500
    tables = (tmp_path / "out" / lm_eval.TABLES_FILE).read_text()
    assert "| model | 8 | 16 | 64 |\n|---|---:|---:|---:|\n" in tables
    assert f"| {teacher} | 1.000 | 1.000 | – |" in tables  # agreement; the table cannot read 64
    losses = [f"{measured['mlm_loss'][length]:.2f}" for length in ("8", "16", "64")]
    assert f"| {student} | {' | '.join(losses)} |" in tables


def test_one_mlm_head_for_every_model(models, tmp_path, capsys):
    encoder, teacher = str(models / "student-encoder"), str(models / "teacher")
    record = evaluate(models, tmp_path / "out", encoder, extra=("--mlm-head", teacher))
    head_model = AutoModelForMaskedLM.from_pretrained(teacher).eval()
    model = AutoModel.from_pretrained(encoder).eval()
    _, loss = direct_numbers(model, head_model, models, 64, head_model=head_model)
    assert record["models"][encoder]["mlm_loss"]["64"] == pytest.approx(loss, rel=1e-5)
    assert record["mlm_head"] == teacher

    # finished results stay unless --overwrite; a head checkpoint must hold a head
    argv = [encoder, "--teacher", teacher, "--text", str(models / "test.txt"), "--lengths", "8"]
    assert lm_eval_main([*argv, "--out", str(tmp_path / "out")]) == 2
    assert "lm_eval.json exists; choose another --out or pass --overwrite." in capsys.readouterr().err
    argv = [teacher, "--mlm-head", encoder, "--text", str(models / "test.txt"), "--lengths", "8"]
    assert lm_eval_main([*argv, "--out", str(tmp_path / "other")]) == 2
    assert "holds no MLM head (its config names TisaBertModel)" in capsys.readouterr().err
    assert lm_eval_main([teacher, "--text", str(models / "test.txt"), "--lengths", "4096", "--out", "x"]) == 2
    assert "is too short for --lengths 4096: it gives no block of that length." in capsys.readouterr().err


def test_paired_differences_and_their_intervals_resample_blocks(models, tmp_path, capsys):
    student, teacher = str(models / "student"), str(models / "teacher")
    interpolated = f"interp:{teacher}"
    record = evaluate(models, tmp_path / "out", student, teacher, interpolated, extra=("--paired", teacher))
    paired = record["paired"][teacher]
    assert set(paired) == {student, interpolated}
    for length in ("8", "16", "64"):
        weights = record["block_tokens"][length]["mlm_loss"]
        assert len(weights) == record["blocks"][length]
        sums = record["models"][student]["block_sums"]["mlm_loss"][length]
        assert sum(sums) / sum(weights) == pytest.approx(record["models"][student]["mlm_loss"][length], rel=1e-12)
    entry = paired[student]["mlm_loss"]["16"]
    expected = record["models"][student]["mlm_loss"]["16"] - record["models"][teacher]["mlm_loss"]["16"]
    assert entry["difference"] == pytest.approx(expected, rel=1e-9)
    # The interval against a bootstrap written out here: resample the 20 blocks, the same for both models.
    sums, base = (np.array(record["models"][name]["block_sums"]["mlm_loss"]["16"]) for name in (student, teacher))
    weights = np.array(record["block_tokens"]["16"]["mlm_loss"])
    draws = np.random.default_rng(7).integers(0, len(weights), (20000, len(weights)))
    replicates = (sums[draws].sum(1) - base[draws].sum(1)) / weights[draws].sum(1)
    low, high = np.percentile(replicates, [2.5, 97.5])
    assert entry["low"] < entry["difference"] < entry["high"]
    assert abs(entry["low"] - low) < 0.1 * (high - low) and abs(entry["high"] - high) < 0.1 * (high - low)
    assert paired[interpolated]["mlm_loss"]["8"] == {"difference": 0.0, "low": 0.0, "high": 0.0}  # scale 1
    assert paired[interpolated]["mlm_loss"]["64"] is None and paired[student]["agreement"]["64"] is None
    tables = (tmp_path / "out" / lm_eval.TABLES_FILE).read_text()
    cell = f"{entry['difference']:+.2f} [{entry['low']:+.2f}, {entry['high']:+.2f}]"
    assert f"Masked-token loss, minus {teacher}'s (95% bootstrap interval over blocks; * excludes 0):" in tables
    assert f"| {interpolated} | +0.00 [+0.00, +0.00] | +0.00 [+0.00, +0.00] | – |" in tables
    assert cell in tables.split(f"minus {teacher}'s")[2]

    argv = [student, "--teacher", teacher, "--text", str(models / "test.txt"), "--lengths", "8", "--paired", "minilm"]
    assert lm_eval_main([*argv, "--out", str(tmp_path / "refused")]) == 2
    assert "--paired minilm: a reference must be one of the compared models." in capsys.readouterr().err
    assert not (tmp_path / "refused").exists()
    for option in ("--max-tokens", "--bootstrap"):
        assert lm_eval_main([*argv[:-2], option, "0", "--out", str(tmp_path / "refused")]) == 2
        assert capsys.readouterr().err == (
            f"tisa-hf lm-eval: argument {option}: must be at least 1, got 0; see tisa-hf lm-eval --help.\n"
        )


def test_an_interrupted_evaluation_resumes_to_an_uninterrupted_ones_results(models, tmp_path, monkeypatch, caplog):
    student, teacher = str(models / "student"), str(models / "teacher")
    specs, extra = (student, f"interp:{teacher}"), ("--paired", student)
    clean = evaluate(models, tmp_path / "clean", *specs, extra=extra)
    loaded = []
    load_model = lm_eval.load_model

    def killed_after_one_model(facts, device):
        loaded.append(facts.name)
        if len(loaded) == 3:  # the teacher, the student, then the interpolated teacher
            raise KeyboardInterrupt
        return load_model(facts, device)

    monkeypatch.setattr(lm_eval, "load_model", killed_after_one_model)
    out = tmp_path / "out"
    with caplog.at_level(logging.INFO, logger="tisa_hf"):
        evaluate(models, out, *specs, extra=extra, status=130)
    assert not (out / lm_eval.RESULTS_FILE).exists()
    assert "at 64 tokens: masked-token loss" in caplog.text  # a line per cell when no bar is shown
    saved = json.loads((out / PROGRESS_FILE).read_text())
    assert list(saved["cells"]) == [student]
    assert saved["cells"][student]["16"] == {
        measure: clean["models"][student]["block_sums"][measure]["16"] for measure in lm_eval.MEASURES
    }

    # other settings are refused, naming them; the same ones resume without recomputing the student
    argv = [*specs, "--teacher", teacher, "--text", str(models / "test.txt"), "--out", str(out), "--lengths"]
    refused = [*argv, *map(str, LENGTHS), "--max-tokens", str(MAX_TOKENS), "--batch-tokens", "100", "--seed", "1"]
    with pytest.raises(UsageError, match=r"holds an unfinished evaluation with other settings \(seed: 0 -> 1\); "):
        lm_eval.run(lm_eval.lm_eval_parser().parse_args(refused))
    loaded.clear()
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="tisa_hf"):
        resumed = evaluate(models, out, *specs, extra=extra)
    assert loaded == [teacher, teacher]  # the teacher's states at 8 and 16, then the interpolated model
    assert "Resuming: 3 of the 6 (model, length) results are kept from an earlier run" in caplog.text
    assert not (out / PROGRESS_FILE).exists()
    for record in (clean, resumed):
        record.pop("wall_time_s")
    assert resumed == clean
    for name in (lm_eval.TABLES_FILE, lm_eval.PLOT_FILE):
        assert (out / name).read_bytes() == (tmp_path / "clean" / name).read_bytes()


BAD_SETTINGS = {
    "no masked token": (
        ("--mlm-probability", "0"),
        "--mlm-probability is the share of tokens masked, in (0, 1]; got 0.0.",
    ),
    "output folder under a file": ((), "cannot be written ("),
    "a length no model reads": (
        ("--lengths", "8", "64"),
        "--lengths 64: no model gets a number at 64 tokens (their position tables: {teacher}: 16; agreement needs",
    ),
    "a model twice": ((), "{teacher}: given more than once; give each model once."),
    "a binary text": ((), "is not UTF-8 text (byte 0x80 at offset 0); give a plain-text file"),
    "an unfinished evaluation's unreadable results": (
        (),
        "lm_eval_progress.json (an interrupted evaluation's results) cannot be read (",
    ),
}


@pytest.mark.parametrize("case", BAD_SETTINGS, ids=list(BAD_SETTINGS))
def test_bad_settings_fail_in_one_line_before_any_model_loads(case, models, tmp_path, monkeypatch, capsys):
    extra, message = BAD_SETTINGS[case]
    teacher = str(models / "teacher")

    def no_loading(*args, **kwargs):
        raise AssertionError("a model was loaded")

    monkeypatch.setattr(lm_eval, "load_model", no_loading)
    out, text = tmp_path / "out", models / "test.txt"
    if case == "output folder under a file":
        (tmp_path / "file").write_text("")
        out = tmp_path / "file" / "out"
    if case == "a binary text":
        text = tmp_path / "binary.txt"
        text.write_bytes(bytes(range(128, 256)))
    if case == "an unfinished evaluation's unreadable results":
        out.mkdir()
        (out / PROGRESS_FILE).write_text('{"settings": {')
    argv = [teacher, "--text", str(text), "--lengths", "8", "--out", str(out), "--max-tokens", str(MAX_TOKENS)]
    if case == "a model twice":
        argv.insert(0, teacher)
    assert lm_eval_main([*argv, *extra]) == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and error.startswith("tisa-hf lm-eval: ")
    assert message.format(teacher=teacher) in error
    assert case == "an unfinished evaluation's unreadable results" or not out.exists()
