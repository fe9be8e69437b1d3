"""`tisa-hf bench` on models of BERT-base's shape at a tiny width: `--profile` (its options, its table, and where it
puts the calls), the shapes, dropout rates and sections timed, and compiled and held-backend steps."""

from __future__ import annotations

import argparse
import json

import pytest
import torch
from transformers import BertConfig

from tisa_hf import attention
from tisa_hf.kernels import TisaPositionBias
from tisa_hf.performance import bench, cases, step_profile
from tisa_hf.performance.options import batch_shape


def test_shape_option_reads_batch_by_length():
    assert batch_shape("8x128") == (8, 128)
    for wrong in ("8", "8x", "0x4", "2x3x4"):
        with pytest.raises(argparse.ArgumentTypeError):
            batch_shape(wrong)


BERT_BASE_CONFIG = cases.bert_base_config


def small_config(implementation: str, dropout: float, max_positions: int = 512) -> BertConfig:
    """BERT-base's settings at a tiny width (the vocabulary holds the benchmark's token ids), so that a step takes
    milliseconds."""
    config = BERT_BASE_CONFIG(implementation, dropout, max_positions)
    config.update({"hidden_size": 48, "intermediate_size": 64, "vocab_size": 20000, "num_attention_heads": 4})
    return config


def test_profile_prints_and_saves_each_variant_and_phase(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(step_profile, "bert_base_config", small_config)
    output = tmp_path / "profile.json"
    arguments = ["--device", "cpu", "--profile", "--layers", "1", "--shapes", "1x8", "--implementations", "sdpa"]
    assert bench.main([*arguments, "--attention-dropout", "0", "--output", str(output)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[1] == "sdpa, float32, 1 layers, batch 1 x 8, attention dropout 0.0 in training, cpu (CPU ms)"
    assert lines[2].startswith("variant       phase   calls   fwd   bwd optim  a layer  extra launches  bias ms")
    rows = json.loads(output.read_text())["profile"]["profiles"][0]["rows"]
    assert [(row["variant"], row["phase"]) for row in rows] == [
        (variant, phase) for phase in ("train", "infer") for variant in step_profile.VARIANTS
    ]
    stock, add = rows[0], rows[1]
    assert stock["calls"] == stock["forward_calls"] + stock["backward_calls"] + stock["optimizer_calls"]
    assert stock["optimizer_calls"] > 0 and stock["backward_calls"] > 0 and rows[3]["backward_calls"] == 0
    assert stock["bias_ms"] == stock["bias_backward_ms"] == 0 and stock["attention_ms"] > 0
    assert add["bias_ms"] > 0 and add["bias_backward_ms"] > 0 and add["attention_backward_ms"] > 0
    assert add["forward_calls"] > stock["forward_calls"] and add["device_kernels"] is None
    extra = add["forward_calls"] + add["backward_calls"] - stock["forward_calls"] - stock["backward_calls"]
    assert lines[4].split()[8] == f"{extra:.1f}"  # one layer: the extra calls of the whole step


def test_sections_are_labelled_only_while_profiling():
    mapping = step_profile.AttentionInterface._global_mapping
    originals = (TisaPositionBias.forward, attention.logits.merge_bias, dict(mapping))
    with step_profile.labelled_sections():
        assert TisaPositionBias.forward is not originals[0] and attention.logits.merge_bias is not originals[1]
    assert (TisaPositionBias.forward, attention.logits.merge_bias) == originals[:2]
    assert mapping == originals[2]


def test_top_level_calls_leave_out_the_calls_inside_them():
    with torch.profiler.profile() as recorded:
        torch.ones(3).add(1).softmax(0)  # ones calls fill_ inside; softmax calls _softmax
    names = [event.name for event in step_profile.top_level_aten(list(recorded.events()))]
    assert names == ["aten::ones", "aten::add", "aten::softmax"]


def test_compile_times_plain_and_tisa_eager_and_compiled_side_by_side(tmp_path, capsys, monkeypatch):
    """`--compile`: four variants a shape, each with its median and range, the eager and compiled ratios, and the
    compile times apart."""

    monkeypatch.setattr(cases, "bert_base_config", small_config)
    output = tmp_path / "bench.json"
    arguments = ["--device", "cpu", "--sections", "train", "infer", "--implementations", "sdpa", "--compile"]
    arguments += ["--layers", "2"]
    arguments += ["--compile-backend", "aot_eager", "--warmup", "0", "--repeats", "2", "--no-memory"]
    assert bench.main([*arguments, "--attention-dropout", "0", "--output", str(output)]) == 0
    results = json.loads(output.read_text())
    for section in ("train", "infer"):
        assert [(row["batch"], row["length"]) for row in results[section]] == [(8, 128), (2, 512)]
        for row in results[section]:
            for name in ("plain", "tisa", "plain_compiled", "tisa_compiled"):
                low, high = row[f"{name}_range"]
                assert 0 < low <= row[name] <= high
            assert row["time_ratio"] == row["tisa"] / row["plain"]
            assert row["compiled_time_ratio"] == row["tisa_compiled"] / row["plain_compiled"]
            assert row["plain_compiled_compile_s"] > 0 and row["tisa_compiled_compile_s"] > 0
            assert row["compile_backend"] == "aot_eager"
    table = capsys.readouterr().out.splitlines()
    compiled_lines = [line for line in table if line.split()[:1] == ["compiled"]]
    assert len(compiled_lines) == 4 and all("(compile " in line for line in compiled_lines)


def test_a_step_held_to_one_sdpa_backend_runs_on_it_and_fp16_training_scales_its_loss(monkeypatch):
    """`--sdpa-backend math` holds every SDPA call of a step to that backend (a backend that cannot run the call
    fails instead of falling back), and an fp16 training step goes through a GradScaler."""
    monkeypatch.setattr(cases, "bert_base_config", small_config)
    case = cases.ModelCase("train", "sdpa", 1, 8, True, "float32", "cpu", 0.1, sdpa_backend="math", layers=1)
    assert case.label() == "train sdpa 1x8 float32 dropout 0.1 1 layers math SDPA only"  # TISA on the stored bias
    held = []
    original = torch.nn.functional.scaled_dot_product_attention

    def recording(*args, **kwargs):
        held.append(torch.backends.cuda.math_sdp_enabled() and not torch.backends.cuda.flash_sdp_enabled())
        return original(*args, **kwargs)

    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", recording)
    cases.step_function(case, cases.build_model(case))()
    assert held and all(held)
    scaled, scale = [], torch.amp.GradScaler.scale

    def recording_scale(self, loss):
        scaled.append(self.is_enabled())
        return scale(self, loss)

    monkeypatch.setattr(torch.amp.GradScaler, "scale", recording_scale)
    fp16 = cases.ModelCase("train", "sdpa", 1, 8, True, "float16", "cpu", 0.0, layers=1)
    cases.step_function(fp16, cases.build_model(fp16))()
    assert scaled == [True]


def test_defaults_are_the_small_shapes_on_a_cpu_and_fine_tuning_shapes_too_on_cuda(monkeypatch):
    args = bench.parse_args(["--device", "cpu", "--output", "/dev/null"])
    assert (args.shapes, args.replace_lengths, args.attention_dropout) == (
        [(8, 128), (2, 512)],
        [1024, 2048, 4096],
        [0.1],
    )
    assert bench.parse_args(["--device", "cpu", "--profile", "--output", "/dev/null"]).shapes == [(2, 128)]
    monkeypatch.setattr(bench, "checked_device", lambda name: torch.device("cuda"))
    args = bench.parse_args(["--output", "/dev/null"])
    assert args.shapes == [(8, 128), (2, 512), (32, 128), (24, 384), (8, 512)]
    assert args.replace_lengths == [1024, 2048, 4096, 8192]


def test_fine_tuning_shapes_dropout_rates_and_replace_training_are_timed(tmp_path, capsys, monkeypatch):
    """GLUE's, SQuAD's and 8 x 512 training and inference steps, each training shape at each dropout rate, and a TISA
    replace training step past the position table against the enlarged table: a row each, in the table too."""
    monkeypatch.setattr(cases, "bert_base_config", small_config)
    built = []
    build_model = cases.build_model
    monkeypatch.setattr(
        bench, "build_model", lambda case, positions=None: built.append(case) or build_model(case, positions)
    )
    output = tmp_path / "bench.json"
    arguments = ["--device", "cpu", "--sections", "train", "infer", "replace-train", "--implementations", "sdpa"]
    arguments += [
        "--shapes",
        "32x128",
        "24x384",
        "8x512",
        "--attention-dropout",
        "0.1",
        "0",
        "--replace-lengths",
        "640",
    ]
    assert (
        bench.main(
            [*arguments, "--layers", "1", "--warmup", "0", "--repeats", "1", "--no-memory", "--output", str(output)]
        )
        == 0
    )
    results = json.loads(output.read_text())
    shapes = [(32, 128), (24, 384), (8, 512)]
    assert [(row["batch"], row["length"], row["dropout"]) for row in results["train"]] == [
        (*shape, dropout) for shape in shapes for dropout in (0.1, 0.0)
    ]
    assert [(row["batch"], row["length"], row["dropout"]) for row in results["infer"]] == [(*s, 0.0) for s in shapes]
    assert [(row["batch"], row["length"], row["dropout"]) for row in results["replace-train"]] == [
        (1, 640, 0.1),
        (1, 640, 0.0),
    ]
    assert all(row["layers"] == 1 and row["time_ratio"] == row["tisa"] / row["plain"] for row in results["train"])
    replace = [case for case in built if case.section == "replace-train"]
    plain, tisa = (build_model(case, bench.reference_positions(case)) for case in replace[:2])
    assert plain.config.max_position_embeddings == 640 and plain.training and tisa.training
    assert tisa.config.tisa.mode == "replace" and tisa.config.max_position_embeddings == 512
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[:6] for line in lines if line.startswith("replace-train")] == [
        ["replace-train", "bert", "sdpa", "1x640", "float32", "0.1"],
        ["replace-train", "bert", "sdpa", "1x640", "float32", "0"],
    ]


def test_the_timed_models_memory_is_handed_back_before_each_peak_memory_run(tmp_path, monkeypatch):
    """The peak-memory subprocesses run after the timing: the memory the timed models freed goes back to the system
    first, or a large shape's subprocess runs out beside this process's retained heap (24 x 384 did on 24 GiB)."""
    monkeypatch.setattr(cases, "bert_base_config", small_config)
    events = []
    monkeypatch.setattr(bench, "return_freed_memory", lambda device: events.append(f"freed on {device}"))
    measured = {"peak_mib": 2.0, "baseline_mib": 1.0}
    monkeypatch.setattr(bench, "peak_memory_of", lambda case: events.append(case.label()) or measured)
    arguments = ["--device", "cpu", "--sections", "train", "--implementations", "sdpa", "--shapes", "1x8", "2x8"]
    arguments += ["--layers", "1", "--warmup", "0", "--repeats", "1", "--output", str(tmp_path / "bench.json")]
    assert bench.main(arguments) == 0
    assert events == [
        event
        for shape in ("1x8", "2x8")
        for event in ("freed on cpu", *[f"train sdpa {shape} float32 dropout 0.1 1 layers"] * 2)
    ]
