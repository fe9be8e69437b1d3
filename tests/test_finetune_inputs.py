"""What a user can get wrong in fine-tuning settings and data, refused in one line before the model loads, and a
diverging run, stopped at its first non-finite loss. Nothing here reaches the network."""

import json
import math
from pathlib import Path

import pytest
import torch
import yaml
from accelerate import Accelerator
from transformers import BertConfig, RobertaConfig

from tests.fixtures import glue_argv, write_glue_tsv, write_rte_tsv, write_tiny_model
from tisa_hf.adapt.arguments import ADAPT_ARGUMENTS
from tisa_hf.commands import cli
from tisa_hf.common.checkpoints import position_limit
from tisa_hf.config import TisaConfig
from tisa_hf.errors import UsageError
from tisa_hf.finetune import precision
from tisa_hf.finetune.arguments import TrainingArguments, parse_arguments
from tisa_hf.finetune.finite import TrainingDiverged, check_finite_step, finite_json
from tisa_hf.finetune.glue import task as glue_module
from tisa_hf.finetune.glue.data import load_glue
from tisa_hf.finetune.glue.options import GLUE_ARGUMENTS
from tisa_hf.finetune.precision import check_mixed_precision
from tisa_hf.finetune.task_tables import get_task

glue = cli.entry("glue")  # `tisa-hf glue`

SHARED_GLUE = Path(__file__).resolve().parents[2] / "shared" / "glue"
HEADER = "index\tsentence1\tsentence2\tlabel\n"


@pytest.fixture(scope="module")
def workspace(tmp_path_factory):
    root = tmp_path_factory.mktemp("inputs")
    write_rte_tsv(root / "RTE")
    write_glue_tsv(root / "STS-B", "stsb")
    write_tiny_model(root / "bert")
    return root


class ModelLoaded(Exception):
    """Raised in place of loading the model: the run got past every check."""


@pytest.fixture
def no_model_loading(monkeypatch):
    def refuse(*args, **kwargs):
        raise ModelLoaded

    monkeypatch.setattr(glue_module, "load_model_and_tokenizer", refuse)


def error_line(capsys) -> str:
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    return err.rstrip("\n")


def parse(*argv: str):
    return parse_arguments(GLUE_ARGUMENTS, list(argv), prog="test")


# A diverging run


def test_a_diverging_run_stops_before_clipping_non_finite_gradients(workspace, tmp_path, capsys, monkeypatch):
    clipped_finite = []
    clip = Accelerator.clip_grad_norm_

    def recording_clip(self, parameters, *args, **kwargs):
        parameters = list(parameters)
        clipped_finite.append(all(bool(torch.isfinite(p.grad).all()) for p in parameters if p.grad is not None))
        return clip(self, parameters, *args, **kwargs)

    backward = Accelerator.backward

    def diverging_backward(self, loss, **kwargs):
        """At learning rate 1000 the weights blow up within a few steps, but whether the gradients turn NaN or
        only huge by step 3 depends on the platform's arithmetic: the step-3 gradients are made NaN here."""
        backward(self, loss, **kwargs)
        if len(clipped_finite) == 2:
            next(parameter for parameter in self._models[0].parameters() if parameter.grad is not None).grad.fill_(
                float("nan")
            )

    monkeypatch.setattr(Accelerator, "clip_grad_norm_", recording_clip)
    monkeypatch.setattr(Accelerator, "backward", diverging_backward)
    output = tmp_path / "run"
    argv = glue_argv(workspace, output, "--learning-rate", "1e3", "--max-steps", "6", "--checkpoint-steps", "1")
    assert glue(argv) == 2
    assert error_line(capsys) == (
        f"tisa-hf glue: The gradient norm is nan at step 3 of 6: training diverged, so the run stops without saving "
        f"this model or metrics (checkpoints of earlier steps in {output} are kept). Lower --learning-rate (now "
        "1000), and train again with --overwrite-output-dir."
    )
    assert clipped_finite == [True, True]  # steps 1 and 2; step 3's non-finite gradients are never clipped
    assert sorted(path.name for path in (output / "checkpoints").iterdir()) == ["step-2"]
    assert not (output / "metrics.json").exists() and not (output / "model.safetensors").exists()


def test_divergence_names_the_remedies_the_settings_leave(tmp_path):
    args = TrainingArguments(output_dir="out", max_steps=10, learning_rate=0.5, max_grad_norm=0, mixed_precision="bf16")
    with pytest.raises(TrainingDiverged) as error:
        check_finite_step(Accelerator(), torch.nn.Linear(2, 1), torch.tensor(float("inf")), 4, args)
    assert str(error.value).endswith(
        "Lower --learning-rate (now 0.5); or clip gradients with --max-grad-norm 1.0; or train in fp32 "
        "(--mixed-precision no instead of bf16), and train again with --overwrite-output-dir."
    )
    model = torch.nn.Linear(2, 1)
    model(torch.ones(1, 2)).sum().backward()
    check_finite_step(Accelerator(), model, torch.tensor(2.5), 4, args)
    model.weight.grad[0, 0] = float("inf")
    with pytest.raises(TrainingDiverged, match="^The gradient norm is inf at step 4 of 10: training diverged"):
        check_finite_step(Accelerator(), model, torch.tensor(2.5), 4, args)


# Non-finite labels and metrics


@pytest.mark.parametrize("score", ["nan", "inf", "-Infinity"])
def test_non_finite_sts_b_scores_are_named_with_file_and_line(tmp_path, score):
    folder = write_glue_tsv(tmp_path / "STS-B", "stsb", train_rows=4, dev_rows=4)
    lines = (folder / "train.tsv").read_text().splitlines()
    lines[3] = lines[3].rsplit("\t", 1)[0] + f"\t{score}"
    (folder / "train.tsv").write_text("\n".join(lines) + "\n")
    with pytest.raises(UsageError) as error:
        load_glue(get_task("stsb"), data_dir=str(tmp_path))
    assert str(error.value) == f"{folder / 'train.tsv'}:4: STS-B score {score!r} is not a finite number."


@pytest.mark.parametrize(
    ("score", "message"),
    [("inf", "STS-B score inf is not a finite number."), ("nan", "no STS-B score (an empty or NaN field).")],
)
def test_non_finite_score_in_a_csv_file_is_named(tmp_path, score, message):
    (tmp_path / "train.csv").write_text(f"sentence1,sentence2,label\na,b,1.5\nc,d,{score}\n")
    (tmp_path / "dev.csv").write_text("sentence1,sentence2,label\na,b,1.5\nc,d,2.0\n")
    with pytest.raises(UsageError) as error:
        load_glue(get_task("stsb"), train_file=str(tmp_path / "train.csv"), validation_file=str(tmp_path / "dev.csv"))
    assert str(error.value) == f"{tmp_path / 'train.csv'}: row 2: {message}"


def test_a_nan_metric_stops_the_run_without_metrics_json(workspace, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(glue_module, "glue_metrics", lambda task, logits, labels: {"accuracy": math.nan})
    output = tmp_path / "run"
    assert glue(glue_argv(workspace, output)) == 2
    assert error_line(capsys) == (
        "tisa-hf glue: The evaluation at step 6 gave validation.accuracy = nan, which is no score (a correlation is "
        "undefined when all predictions are equal: the model collapsed). Lower --learning-rate, or check the dev "
        "data, and train again with --overwrite-output-dir."
    )
    assert not (output / "metrics.json").exists()


def test_records_are_standard_json_or_refused():
    assert finite_json({"metrics": {"pearson": 0.5}}, "metrics.json") == '{"metrics": {"pearson": 0.5}}'
    with pytest.raises(UsageError) as error:
        finite_json({"history": [{"pearson": 0.5}, {"pearson": float("-inf")}]}, "metrics.json")
    assert str(error.value) == (
        "metrics.json would hold non-finite numbers (history.1.pearson = -inf), which standard JSON cannot; it is not "
        "written."
    )


def test_sts_b_dev_set_of_one_score_is_refused_before_the_model_loads(workspace, tmp_path, capsys, no_model_loading):
    argv = glue_argv(workspace, tmp_path / "run", "--task", "stsb", "--max-eval-samples", "1")
    assert glue(argv) == 2
    assert error_line(capsys) == (
        "tisa-hf glue: The validation split has 1 example(s) with 1 distinct score(s); the pearson correlation needs "
        "at least two different scores. Raise --max-eval-samples or use a larger dev file."
    )


# Another task's label vocabulary


def test_digit_labels_in_a_task_that_names_its_labels_are_refused(tmp_path):
    rows = HEADER + "0\ta\tb\t1\n1\tc\td\t0\n"
    (tmp_path / "train.tsv").write_text(rows)
    (tmp_path / "dev.tsv").write_text(rows)
    with pytest.raises(UsageError) as error:
        load_glue(get_task("rte"), data_dir=str(tmp_path))
    assert str(error.value) == (
        f"{tmp_path / 'train.tsv'}: labels 0, 1 are not rte's, whose files name their labels (entailment, "
        "not_entailment), not class numbers; class numbers mean other things in other tasks (WNLI's 1 is "
        "entailment, rte's 1 would be not_entailment). Pass the RTE files."
    )


@pytest.mark.skipif(not (SHARED_GLUE / "WNLI").is_dir(), reason="the GLUE files of ../shared/glue are not present")
def test_the_real_wnli_files_are_not_taken_for_rte():
    with pytest.raises(UsageError, match=r"WNLI/train\.tsv: labels 0, 1 are not rte's"):
        load_glue(get_task("rte"), data_dir=str(SHARED_GLUE / "WNLI"))


def test_csv_labels_are_hub_class_ids_or_names_but_not_both(tmp_path):
    (tmp_path / "ids.csv").write_text("sentence1,sentence2,label\na,b,0\nc,d,1\n")
    (tmp_path / "mixed.csv").write_text("sentence1,sentence2,label\na,b,entailment\nc,d,1\n")
    files = {"train_file": str(tmp_path / "ids.csv"), "validation_file": str(tmp_path / "ids.csv")}
    assert load_glue(get_task("rte"), **files)["train"]["label"] == [0, 1]
    with pytest.raises(UsageError) as error:
        load_glue(get_task("rte"), **{**files, "validation_file": str(tmp_path / "mixed.csv")})
    assert str(error.value) == (
        f"{tmp_path / 'mixed.csv'}: labels 1, entailment mix class numbers and names; give rte's names (entailment, "
        "not_entailment) or the Hub's class ids, not both."
    )


def test_sources_that_cannot_mean_what_they_say(tmp_path):
    (tmp_path / "a.csv").write_text("premise,hypothesis,label\na,b,neutral\n")
    with pytest.raises(UsageError, match=r"^MNLI is scored on 2 dev sets \(validation_matched, validation_mism"):
        load_glue(get_task("mnli"), train_file=str(tmp_path / "a.csv"), validation_file=str(tmp_path / "a.csv"))
    with pytest.raises(UsageError) as error:
        load_glue(get_task("rte"), data_dir=str(tmp_path), dataset_name="someone/glue")
    assert str(error.value) == "--dataset-name someone/glue is read only when no files are given; leave it out."


# Input lengths


def test_max_seq_length_must_be_positive():
    with pytest.raises(UsageError) as error:
        parse("--max-seq-length", "0")
    assert str(error.value) == "--max-seq-length must be at least 1; got 0."


def test_a_length_without_room_for_both_texts_names_the_minimum(workspace, tmp_path, capsys, no_model_loading):
    assert glue(glue_argv(workspace, tmp_path / "run", "--max-seq-length", "4")) == 2
    assert error_line(capsys) == (
        "tisa-hf glue: --max-seq-length 4 cannot hold a pair of texts: the tokenizer adds 3 special tokens, and each "
        "text needs at least one token; use --max-seq-length 5 or more."
    )
    with pytest.raises(ModelLoaded):
        glue(glue_argv(workspace, tmp_path / "run", "--max-seq-length", "5"))


def test_a_length_beyond_the_position_table_is_refused_unless_replace_mode(
    workspace, tmp_path, capsys, no_model_loading
):
    model = workspace / "bert"
    assert glue(glue_argv(workspace, tmp_path / "run", "--max-seq-length", "65")) == 2
    assert error_line(capsys) == (
        f"tisa-hf glue: --max-seq-length 65 exceeds the position table of {model}, 64 positions (no TISA); use "
        "TISA in replace mode (--tisa.num_kernels 5 --tisa.mode replace), which reads any length, or "
        "--max-seq-length 64 or less."
    )
    add = ("--tisa.num_kernels", "2", "--tisa.init", "random")
    assert glue(glue_argv(workspace, tmp_path / "run", "--max-seq-length", "65", *add)) == 2
    assert "64 positions (TISA mode='add' keeps it); use" in error_line(capsys)
    with pytest.raises(ModelLoaded):
        glue(glue_argv(workspace, tmp_path / "run", "--max-seq-length", "65", *add, "--tisa.mode", "replace"))


def test_position_limit_counts_the_rows_real_tokens_use():
    assert position_limit(RobertaConfig(max_position_embeddings=514, pad_token_id=1), None) == 512
    assert position_limit(BertConfig(max_position_embeddings=64), TisaConfig(mode="add")) == 64
    assert position_limit(BertConfig(max_position_embeddings=64), TisaConfig(mode="replace")) is None


# Precision


def test_fp16_on_the_cpu_is_refused_before_the_model_loads(workspace, tmp_path, capsys, no_model_loading):
    assert glue(glue_argv(workspace, tmp_path / "run", "--mixed-precision", "fp16")) == 2
    assert error_line(capsys) == (
        "tisa-hf glue: --mixed-precision fp16 needs a GPU, and this run trains on the CPU, where it would train in "
        "float32; use --mixed-precision bf16 (the CPU's autocast) or no."
    )


def test_bf16_on_a_gpu_without_it_is_refused(monkeypatch):
    monkeypatch.setattr(precision.torch.cuda, "is_bf16_supported", lambda: False)
    monkeypatch.setattr(precision.torch.cuda, "get_device_name", lambda device: "Tesla T4")
    with pytest.raises(UsageError) as error:
        check_mixed_precision("bf16", torch.device("cuda", 0))
    assert str(error.value) == (
        "--mixed-precision bf16 needs a GPU with bfloat16, and Tesla T4 has none; use --mixed-precision fp16 or no."
    )
    check_mixed_precision("fp16", torch.device("cuda", 0))
    check_mixed_precision("bf16", torch.device("cpu"))


# Options and YAML values


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--gradient-accumulation-steps", "0"], "--gradient-accumulation-steps must be at least 1; got 0."),
        (["--train-batch-size", "0"], "--train-batch-size must be at least 1; got 0."),
        (["--eval-batch-size", "-8"], "--eval-batch-size must be at least 1; got -8."),
        (["--eval-steps", "-1"], "--eval-steps must be at least 0; got -1."),
        (["--logging-steps", "-1"], "--logging-steps must be at least 0; got -1."),
        (["--checkpoint-steps", "-5"], "--checkpoint-steps must be at least 0; got -5."),
        (["--learning-rate=-1e-5"], "--learning-rate must be at least 0; got -1e-05."),
        (["--learning-rate", "nan"], "--learning-rate must be at least 0; got nan."),
        (["--max-grad-norm", "-1"], "--max-grad-norm must be at least 0; got -1.0."),
        (["--adam-epsilon", "0"], "--adam-epsilon must be a positive number; got 0.0."),
        (["--seed", "-1"], "--seed must be in [0, 2**32); got -1."),
        (["--tisa.lr", "-0.1"], "--tisa.lr must be at least 0; got -0.1."),
    ],
)
def test_impossible_options_are_named_when_parsed(argv, message):
    with pytest.raises(UsageError) as error:
        parse(*argv)
    assert str(error.value) == message


@pytest.mark.parametrize(
    ("yaml_text", "message"),
    [
        ("max_seq_length: 32.7", "max_seq_length must be an integer; got 32.7."),
        ("max_steps: true", "max_steps must be an integer (or null); got True."),
        ("learning_rate: fast", "learning_rate must be a number; got 'fast'."),
        ("mixed_precision: fp8", "mixed_precision must be one of no, fp16, bf16; got 'fp8'."),
        ("resume: maybe", "resume must be true or false; got 'maybe'."),
        ("tisa: {mode: 3}", "tisa_mode must be one of add, replace; got 3."),
        ("tokenizer: [a, b]", "tokenizer must be a string (or null); got ['a', 'b']."),
    ],
)
def test_yaml_values_of_the_wrong_type_name_key_file_value_and_type(tmp_path, yaml_text, message):
    config = tmp_path / "run.yaml"
    config.write_text(yaml_text + "\n")
    with pytest.raises(UsageError) as error:
        parse("--config", str(config))
    assert str(error.value) == f"Config file {config}: {message}"


def test_yaml_values_convert_as_the_command_line_does(tmp_path):
    config = tmp_path / "run.yaml"
    config.write_text(yaml.safe_dump({"learning_rate": "1e-05", "max_seq_length": "64", "resume": "yes"}))
    (_, _, args, data) = parse("--config", str(config))
    assert (args.learning_rate, data.max_seq_length, args.resume) == (1e-05, 64, True)


def test_adaptation_options_are_checked_when_parsed(tmp_path):
    config = tmp_path / "adapt.yaml"
    config.write_text(json.dumps({"lengths": [64, "x"]}))
    with pytest.raises(UsageError) as error:
        parse_arguments(ADAPT_ARGUMENTS, ["--config", str(config)], prog="test")
    assert str(error.value) == f"Config file {config}: lengths must be a list, each item an integer; got [64, 'x']."
    with pytest.raises(UsageError) as error:
        parse_arguments(ADAPT_ARGUMENTS, ["--mlm-probability", "0"], prog="test")
    assert str(error.value) == "--mlm-probability is the share of tokens masked, in (0, 1]; got 0.0."
