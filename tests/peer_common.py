"""transformers' own common model tests (`ModelTesterMixin`, `ConfigTester`), imported from the source distribution
of the installed transformers, which `.ci/run` unpacks outside the repository.

Its `tests/` folder holds the common files but not three modules they import, which live elsewhere in transformers'
repository: the generation tests' `GenerationTesterMixin`, the export tests' `ExportTesterMixin` and the config
tests' `config_common_kwargs`. The stand-ins below take their places under the same names; the two mixins carry no
tests of their own (TISA's generation and export are tested in `tests/test_export.py` and the decoder tests).
"""

from __future__ import annotations

import importlib
import os
import sys
import tempfile
from collections import OrderedDict
from pathlib import Path
from types import ModuleType

import transformers

from tisa_hf import supported_model_types
from tisa_hf.model_configs import TISA_CLASS_PREFIX
from tisa_hf.names import tisa_model_type

# The package the sdist's tests/ folder is imported as (its files import each other relatively).
PACKAGE = "transformers_common_tests"
TESTS_VARIABLE = "TISA_HF_TRANSFORMERS_TESTS"


def sdist_tests_folder() -> Path:
    """The sdist's tests/ folder: `$TISA_HF_TRANSFORMERS_TESTS`, else where the fetch command unpacks it."""
    default = Path(tempfile.gettempdir()) / "tisa-hf-transformers-sdist" / f"transformers-{transformers.__version__}"
    return Path(os.environ.get(TESTS_VARIABLE) or default / "tests")


def fetch_command() -> str:
    folder = sdist_tests_folder().parent.parent
    version = transformers.__version__
    return (
        f"pip download transformers=={version} --no-binary :all: --no-deps -d {folder} && "
        f"tar -xzf {folder}/transformers-{version}.tar.gz -C {folder}"
    )


class GenerationTesterMixin:
    """Stand-in for transformers' generation tests: a tester that inherits it declares that its generative classes
    can `generate` (the common suite checks the declaration)."""


class ExportTesterMixin:
    """Stand-in for transformers' export tests (TISA's export: `tests/test_export.py`)."""


# Every attribute a transformers 5 config has in common, with a value other than its default, for
# `ConfigTester.check_config_arguments_init`.
CONFIG_COMMON_KWARGS = {
    "return_dict": False,
    "output_hidden_states": True,
    "output_attentions": True,
    "dtype": "float16",
    "chunk_size_feed_forward": 5,
    "architectures": ["BertModel"],
    "id2label": {0: "label"},
    "label2id": {"label": "0"},
    "problem_type": "regression",
}


def _stand_in(name: str, **attributes) -> ModuleType:
    module = ModuleType(name)
    module.__dict__.update(attributes)
    sys.modules[name] = module
    return module


def import_common_tests() -> tuple[ModuleType, ModuleType]:
    """(test_modeling_common, test_configuration_common) of the sdist, with the stand-ins in place; raises
    FileNotFoundError naming the fetch command where the sdist is not unpacked."""
    folder = sdist_tests_folder()
    if not (folder / "test_modeling_common.py").is_file():
        raise FileNotFoundError(
            f"transformers' common model tests are not at {folder}: run `{fetch_command()}` "
            f"(or set {TESTS_VARIABLE} to the tests/ folder of the unpacked sdist)"
        )
    # `test_configuration_common` imports its own folder's `__init__.py`, which the sdist leaves out (it is empty).
    (folder / "__init__.py").touch()
    if PACKAGE not in sys.modules:
        _stand_in(PACKAGE, __path__=[str(folder)])
        _stand_in(f"{PACKAGE}.generation", __path__=[])
        _stand_in(f"{PACKAGE}.generation.test_utils", GenerationTesterMixin=GenerationTesterMixin)
        _stand_in(f"{PACKAGE}.exporters", __path__=[])
        _stand_in(f"{PACKAGE}.exporters.test_export", ExportTesterMixin=ExportTesterMixin)
        _stand_in(f"{PACKAGE}.utils", __path__=[])
        _stand_in(f"{PACKAGE}.utils.test_configuration_utils", config_common_kwargs=CONFIG_COMMON_KWARGS)
    modeling = importlib.import_module(f"{PACKAGE}.test_modeling_common")
    configuration = importlib.import_module(f"{PACKAGE}.test_configuration_common")
    add_tisa_class_names(modeling)
    return modeling, configuration


def add_tisa_class_names(module: ModuleType) -> None:
    """Gives the suite's copies of transformers' class-name tables (`MODEL_FOR_MASKED_LM_MAPPING_NAMES`, ...) the
    TISA class of every entry of a supported architecture. The suite chooses a class's inputs and labels, and which
    classes train, by finding its name there; TISA's classes are registered with the Auto classes when tisa_hf is
    imported, which those static tables do not record. transformers' own tables are left as they are."""
    for name, table in list(vars(module).items()):
        if name.startswith("MODEL_") and name.endswith("_MAPPING_NAMES"):
            tisa_names = {
                tisa_model_type(model_type): TISA_CLASS_PREFIX + table[model_type]
                for model_type in supported_model_types()
                if isinstance(table.get(model_type), str)
            }
            setattr(module, name, OrderedDict({**table, **tisa_names}))
