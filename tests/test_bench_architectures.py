"""`tisa-hf bench --architectures`: the RoPE encoders (ModernBERT, NomicBERT, GTE, EuroBERT) at BERT base's size,
each with TISA against its stock class, through the bench's own cases and steps at a tiny width."""

from __future__ import annotations

import json

import pytest
import transformers

import tisa_hf
from tisa_hf.errors import UsageError
from tisa_hf.performance import bench, cases
from tisa_hf.performance.options import BENCH_ARCHITECTURES

ROTARY = BENCH_ARCHITECTURES[1:]
# BERT base's settings but the width, so that a step takes milliseconds (the vocabulary holds the bench's token ids).
TINY_ROTARY_SIZES = {"num_attention_heads": 4, "hidden_size": 48, "intermediate_size": 64, "vocab_size": 20000}


def test_rotary_configs_are_bert_base_sized_with_their_own_settings_otherwise(caplog):
    for architecture in ROTARY:
        config = cases.rotary_base_config(architecture, "fused", 0.1, 12)
        assert (config.model_type, config.num_hidden_layers, config.hidden_size) == (architecture, 12, 768)
        assert (config.num_attention_heads, config.vocab_size, config.pad_token_id) == (12, 30522, 0)
        assert getattr(config, cases.ATTENTION_DROPOUT_NAMES[architecture]) == 0.1
        assert config._attn_implementation == "sdpa"
        assert all(getattr(config, name, None) in (None, token) for name, token in cases.BERT_SPECIAL_TOKENS.items())
        default = transformers.AutoConfig.for_model(architecture)
        assert config.intermediate_size == default.intermediate_size
    assert caplog.records == []  # no special token outside the vocabulary
    modernbert = cases.rotary_base_config("modernbert", "sdpa", 0.0, 12)
    assert modernbert.layer_types.count("full_attention") == 4 and modernbert.local_attention == 128


def test_each_architecture_is_timed_with_tisa_against_its_stock_class(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(cases, "ROTARY_BASE_SIZES", {**cases.ROTARY_BASE_SIZES, **TINY_ROTARY_SIZES})
    built = []
    build_model = cases.build_model

    def recording(case, positions=None):
        model = build_model(case, positions)
        built.append((case, model))
        return model

    monkeypatch.setattr(bench, "build_model", recording)
    output = tmp_path / "bench.json"
    arguments = ["--device", "cpu", "--sections", "train", "infer", "replace", "--implementations", "sdpa"]
    arguments += ["--architectures", *ROTARY, "--shapes", "2x16", "--replace-lengths", "80", "--layers", "2"]
    arguments += ["--warmup", "0", "--repeats", "1", "--no-memory", "--output", str(output)]
    assert bench.main(arguments) == 0
    results = json.loads(output.read_text())
    for section in ("train", "infer", "replace"):
        assert [row["architecture"] for row in results[section]] == list(ROTARY)
        assert all(row["plain"] > 0 and row["time_ratio"] == row["tisa"] / row["plain"] for row in results[section])
    for case, model in built:
        stock = cases.model_class(case.architecture, case.section)
        assert type(model) is (tisa_hf.modeling.tisa_model_class(stock) if case.tisa else stock)
        assert model.config.num_hidden_layers == 2 and model.training == (case.section == "train")
        if case.tisa:
            assert model.config.tisa.mode == ("replace" if case.section == "replace" else "add")
    replace = [case for case, _ in built if case.section == "replace" and not case.tisa]
    assert [bench.reference_positions(case) for case in replace] == [None] * len(ROTARY)
    modernbert = next(model for case, model in built if case.architecture == "modernbert")
    assert modernbert.config.layer_types == ["full_attention", "sliding_attention"]
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[:4] for line in lines if line.startswith("infer")] == [
        ["infer", architecture, "sdpa", "2x16"] for architecture in ROTARY
    ]
    assert built[0][0].label() == "train modernbert sdpa 2x16 float32 dropout 0.1 2 layers"


def test_architectures_need_a_model_section_and_are_not_profiled():
    argv = ["--device", "cpu", "--architectures", "bert", "gte", "--output", "/dev/null"]
    with pytest.raises(UsageError) as refused:
        bench.parse_args([*argv, "--profile"])
    assert str(refused.value) == (
        "--architectures gte: --profile profiles BERT's step; leave --architectures out, or --profile out to time them."
    )
    with pytest.raises(UsageError) as refused:
        bench.parse_args([*argv, "--sections", "bias", "long"])
    assert str(refused.value) == (
        "--architectures gte are timed by the sections train, infer, replace, replace-train; add one of them to "
        "--sections (long reads the packaged MiniLM)."
    )
    assert bench.parse_args(argv).architectures == ["bert", "gte"]
    assert bench.parse_args(argv[:2] + ["--output", "/dev/null"]).architectures == ["bert"]
