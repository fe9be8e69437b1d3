"""`tisa-hf bench --profile`: where one training and one inference step of a BERT-shaped model spend their operator
calls and time, with and without TISA, under `torch.profiler`.

GPU kernel launches bound TISA's cost on a GPU at BERT-base sizes (docs/performance.md), so the number of operator
calls is the proxy for that cost that a CPU can measure; on CUDA the GPU kernel launches and their time come too. The
calls counted are top-level ATen calls (an `aten::` event inside no other `aten::` event): the operators Python
dispatches, each one or more GPU kernel launches.

The time is split by labels the profile wraps around the code only while it records (`labelled_sections`), so the
model code carries none: `bias` around every TISA bias computation (the offset tables, the Toeplitz copy, the merge
into the padding mask), `attention` around the attention function (its `bias` part subtracted). Backward work is
attributed through autograd's sequence numbers: a backward node belongs to the section its forward operator ran
in.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass

import torch
from torch.autograd.profiler_util import FunctionEvent
from torch.profiler import ProfilerActivity, profile, record_function
from transformers import AttentionInterface, BertForSequenceClassification
from transformers.models.bert import modeling_bert

from .. import attention
from ..attention import logits
from ..config import TisaConfig
from ..kernels import TisaPositionBias
from ..patching import patch
from .cases import TISA_KERNELS, ModelCase, bert_base_config, step_function, synchronize

BIAS, ATTENTION = "tisa: bias", "tisa: attention"
BACKWARD_PREFIX = "autograd::engine::evaluate_function: "
OPTIMIZER_PREFIX = "Optimizer.step#"
VARIANTS = ("stock", "TISA add", "TISA replace")


@dataclass(frozen=True)
class StepProfile:
    """Operator calls of one step, split into forward, backward and optimizer, and the sections' times in ms (device
    time on CUDA, CPU time otherwise); `device_kernels` counts the GPU kernel launches on CUDA (None elsewhere)."""

    variant: str
    phase: str
    calls: int
    forward_calls: int
    backward_calls: int
    optimizer_calls: int
    device_kernels: int | None
    bias_ms: float
    attention_ms: float
    attention_backward_ms: float
    bias_backward_ms: float


def _wrapped(function: Callable, label: str) -> Callable:
    def labelled(*args, **kwargs):
        with record_function(label):
            return function(*args, **kwargs)

    return labelled


@contextlib.contextmanager
def labelled_sections() -> Iterator[None]:
    """Wraps TISA's bias computations and every attention function BERT can call in profiler labels, and restores
    them on exit."""
    mapping = AttentionInterface._global_mapping
    targets: list[tuple[object, str, str]] = [
        (TisaPositionBias, "forward", BIAS),
        (TisaPositionBias, "offset_table", BIAS),
        (logits, "merge_bias", BIAS),  # every route merges through this module's function
        (modeling_bert, "eager_attention_forward", ATTENTION),
    ]
    originals = [(owner, name, getattr(owner, name)) for owner, name, _ in targets]
    names = ("sdpa", *attention.ATTENTION_FUNCTIONS)
    registered = {name: function for name, function in mapping.items() if name in names}
    try:
        for (owner, name, label), (_, _, function) in zip(targets, originals, strict=True):
            setattr(owner, name, _wrapped(function, label))
        mapping.update({name: _wrapped(function, ATTENTION) for name, function in registered.items()})
        yield
    finally:
        for owner, name, function in originals:
            setattr(owner, name, function)
        mapping.update(registered)


def _ancestors(event: FunctionEvent) -> Iterator[FunctionEvent]:
    parent = event.cpu_parent
    while parent is not None:
        yield parent
        parent = parent.cpu_parent


def top_level_aten(events: list[FunctionEvent]) -> list[FunctionEvent]:
    """The `aten::` events inside no other `aten::` event: the operators Python (or autograd) dispatched."""
    return [
        event
        for event in events
        if event.name.startswith("aten::") and not any(a.name.startswith("aten::") for a in _ancestors(event))
    ]


def _outermost(event: FunctionEvent, prefix: str) -> FunctionEvent | None:
    found = None
    for ancestor in _ancestors(event):
        if ancestor.name.startswith(prefix):
            found = ancestor
    return found


def _section(event: FunctionEvent) -> str | None:
    names = {ancestor.name for ancestor in _ancestors(event)} | {event.name}
    return BIAS if BIAS in names else ATTENTION if ATTENTION in names else None


def _time_ms(events: list[FunctionEvent], on_device: bool) -> float:
    total = sum(event.device_time_total if on_device else event.cpu_time_total for event in events)
    return total / 1000


def summarize(variant: str, phase: str, events: list[FunctionEvent], on_device: bool) -> StepProfile:
    """The calls and section times of one recorded step."""
    calls = top_level_aten(events)
    backward = [call for call in calls if _outermost(call, BACKWARD_PREFIX) is not None]
    optimizer = [call for call in calls if _outermost(call, OPTIMIZER_PREFIX) is not None]
    forward_sections = {
        event.sequence_nr: _section(event)
        for event in events
        if event.sequence_nr >= 0
        and not event.name.startswith(BACKWARD_PREFIX)
        and _outermost(event, BACKWARD_PREFIX) is None
    }
    nodes = [event for event in events if event.name.startswith(BACKWARD_PREFIX)]
    nodes = [node for node in nodes if _outermost(node, BACKWARD_PREFIX) is None]
    labelled = {
        label: [event for event in events if event.name == label and _outermost(event, label) is None]
        for label in (BIAS, ATTENTION)
    }
    by_section = {
        section: [node for node in nodes if forward_sections.get(node.sequence_nr) == section]
        for section in (BIAS, ATTENTION)
    }
    gpu_kernel_launches = sum(event.device_type == torch.autograd.DeviceType.CUDA for event in events)
    bias_in_attention = [e for e in labelled[BIAS] if _outermost(e, ATTENTION) is not None]
    return StepProfile(
        variant=variant,
        phase=phase,
        calls=len(calls),
        forward_calls=len(calls) - len(backward) - len(optimizer),
        backward_calls=len(backward),
        optimizer_calls=len(optimizer),
        device_kernels=gpu_kernel_launches if on_device else None,
        bias_ms=_time_ms(labelled[BIAS], on_device),
        attention_ms=_time_ms(labelled[ATTENTION], on_device) - _time_ms(bias_in_attention, on_device),
        attention_backward_ms=_time_ms(by_section[ATTENTION], on_device),
        bias_backward_ms=_time_ms(by_section[BIAS], on_device),
    )


def build_model(
    variant: str, implementation: str, layers: int, dropout: float, device: torch.device
) -> BertForSequenceClassification:
    """A BERT-base-shaped classifier of `layers` layers (random weights, fixed by the seed), stock or with TISA."""
    torch.manual_seed(0)
    config = bert_base_config(implementation, dropout)
    config.num_hidden_layers = layers
    model = BertForSequenceClassification(config)
    if variant != "stock":
        patch(model, TisaConfig(num_kernels=TISA_KERNELS, mode=variant.split()[-1], init="random"))
    return model.to(device)


def record_step(step: Callable[[], None], device: torch.device) -> list[FunctionEvent]:
    """The profiler events of one call of `step`, after two unrecorded ones (allocator, lazy set-up, caches)."""
    step()
    step()
    synchronize(device)
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    with labelled_sections(), profile(activities=activities) as recorded:
        step()
        synchronize(device)
    return list(recorded.events())


def profile_variants(
    implementation: str, layers: int, batch: int, length: int, dtype: str, dropout: float, device: torch.device
) -> list[StepProfile]:
    """Each variant's training step (forward, backward, AdamW) and inference step (`torch.no_grad`)."""

    rows = []
    for phase in ("train", "infer"):
        for variant in VARIANTS:
            case = ModelCase(phase, implementation, batch, length, variant != "stock", dtype, str(device), dropout)
            model = build_model(variant, implementation, layers, dropout, device).train(phase == "train")
            events = record_step(step_function(case, model), device)
            rows.append(summarize(variant, phase, events, device.type == "cuda"))
    return rows


def format_profile(rows: list[StepProfile], layers: int) -> str:
    """A table of the profiles; `a layer` is forward and backward calls over the layers, `extra` the same less the
    stock model's in that phase."""
    stock = {row.phase: row for row in rows if row.variant == "stock"}
    header = (
        f"{'variant':<13} {'phase':<6} {'calls':>6} {'fwd':>5} {'bwd':>5} {'optim':>5} {'a layer':>8} {'extra':>6}"
        f" {'launches':>8} {'bias ms':>8} {'attn ms':>8} {'attn bwd':>9} {'bias bwd':>9}"
    )
    lines = [header]
    for row in rows:
        model_calls = row.forward_calls + row.backward_calls
        base = stock[row.phase].forward_calls + stock[row.phase].backward_calls
        launches = "-" if row.device_kernels is None else str(row.device_kernels)
        lines.append(
            f"{row.variant:<13} {row.phase:<6} {row.calls:>6} {row.forward_calls:>5} {row.backward_calls:>5}"
            f" {row.optimizer_calls:>5} {model_calls / layers:>8.1f} {(model_calls - base) / layers:>6.1f}"
            f" {launches:>8} {row.bias_ms:>8.2f} {row.attention_ms:>8.2f} {row.attention_backward_ms:>9.2f}"
            f" {row.bias_backward_ms:>9.2f}"
        )
    return "\n".join(lines)


def run_profile(args) -> dict:
    """The profile `tisa-hf bench --profile` asks for: each shape, attention dropout, implementation and dtype,
    printed and returned."""
    device = torch.device(args.device)
    results = []
    for batch, length in args.shapes:
        for dropout in args.attention_dropout:
            for implementation in args.implementations:
                for dtype in args.dtypes:
                    rows = profile_variants(implementation, args.layers, batch, length, dtype, dropout, device)
                    print(
                        f"\n{implementation}, {dtype}, {args.layers} layers, batch {batch} x {length}, attention "
                        f"dropout {dropout} in training, {device} ({'device' if device.type == 'cuda' else 'CPU'} ms)"
                    )
                    print(format_profile(rows, args.layers))
                    setting = {"implementation": implementation, "dtype": dtype, "batch": batch, "length": length}
                    results.append({**setting, "dropout": dropout, "rows": [asdict(row) for row in rows]})
    return {"layers": args.layers, "profiles": results}
