"""`patch`: turning a model already in memory into its TISA type.

The steps are those a TISA model class's `__init__` takes (`attaching`), on a model built without them: its class
becomes the TISA class (`modeling`), its config a TISA config of its own, and its encoder gets the kernels.
"""

from __future__ import annotations

from transformers import PreTrainedModel

try:
    from transformers.utils.output_capturing import _CAN_RECORD_REGISTRY
except ImportError:  # transformers 5.0 and 5.1 keep it in utils.generic
    from transformers.utils.generic import _CAN_RECORD_REGISTRY

from .adapters import find_base_model
from .attaching import attach_tisa, initialize_tisa, tisa_config_of
from .config import TisaConfig
from .model_configs import tisa_model_config
from .modeling import tisa_model_class


def patch(model: PreTrainedModel, tisa: TisaConfig | dict | bool = True) -> PreTrainedModel:
    """Gives a model already in memory TISA, initialised by `tisa.init`; returns the same model, patched in place.

    The model becomes an instance of its TISA class (so it saves as a TISA checkpoint) with a config of its own:
    the config object it was built with, which other models may share, is left as it was.
    """
    config = TisaConfig.from_value(tisa)
    base, adapter = find_base_model(model)
    if tisa_config_of(model) is not None:
        raise ValueError(f"This {type(model).__name__} already has TISA ({tisa_config_of(model)}).")
    old_config = model.config
    new_config = tisa_model_config(old_config, config)
    for module in model.modules():
        if getattr(module, "config", None) is old_config:
            module.config = new_config
    model.__class__ = tisa_model_class(type(model))
    # What __init__ registers for output capture, under the class's name as every 5.x keys it (5.24's registry
    # takes the model and names its class itself; a plain dict before).
    dict.__setitem__(_CAN_RECORD_REGISTRY, str(model.__class__), model._can_record_outputs)
    new_config._attn_implementation_internal = model._check_and_adjust_attn_implementation(
        old_config._attn_implementation
    )
    attach_tisa(base, adapter)
    initialize_tisa(base, adapter)
    return model
