"""Distillation beyond the teacher's position table: the windows, the windowed targets and the loss against a
direct computation (each body token read by the teacher in its own best window, one window at a time)."""

import pytest
import torch
import torch.nn.functional as F
from transformers import AutoModel

import tisa_hf
from tests.fixtures import tiny_config
from tisa_hf.adapt.objectives import DistillationObjective
from tisa_hf.adapt.windowed_teacher import nearest_windows, window_starts, window_stride
from tisa_hf.attaching import model_table_length


def most_context_window(position: int, starts: list[int], width: int) -> int:
    """The window giving `position` the most context on its poorer side (the first such window on a tie), as
    transformers' question-answering examples choose among overlapping document spans."""
    scores = [
        min(position - start, start + width - 1 - position) if start <= position < start + width else -1
        for start in starts
    ]
    return scores.index(max(scores))


@pytest.mark.parametrize(("body", "table"), [(63, 64), (94, 64), (200, 64), (1022, 512), (4094, 512), (8, 5)])
def test_windows_cover_the_body_and_each_token_takes_its_most_context_window(body, table):
    width = table - 2
    starts = window_starts(body, table)
    assert starts[0] == 0 and starts[-1] == body - width  # the first at the start, the last flush with the end
    assert all(b - a == window_stride(table) for a, b in zip(starts, starts[1:-1], strict=False))
    assert 0 < starts[-1] - starts[-2] <= window_stride(table)
    chosen, offsets = nearest_windows(body, table)
    expected = [most_context_window(position, starts, width) for position in range(body)]
    assert chosen.tolist() == expected
    assert offsets.tolist() == [position - starts[window] for position, window in enumerate(expected)]
    assert all(0 <= offset < width for offset in offsets.tolist())


@torch.no_grad()
def reference_loss(student, teacher, input_ids, table, layers):
    """Mean 1 - cosine over the body tokens and the matched layers, each window read by the teacher on its own."""
    first = 1 if layers == "all" else -1
    body, width = input_ids.shape[1] - 2, table - 2
    starts = window_starts(body, table)
    student_states = student(input_ids, output_hidden_states=True).hidden_states[first:]
    targets = [torch.empty_like(state[:, 1:-1]) for state in student_states]
    for sequence, ids in enumerate(input_ids):
        for start in starts:
            window = torch.cat([ids[:1], ids[1 + start : 1 + start + width], ids[-1:]])[None]
            states = teacher(window, output_hidden_states=True).hidden_states[first:]
            for position in range(body):
                if starts[most_context_window(position, starts, width)] == start:
                    for target, state in zip(targets, states, strict=True):
                        target[sequence, position] = state[0, 1 + position - start]
    pairs = zip(student_states, targets, strict=True)
    return torch.stack([(1 - F.cosine_similarity(s[:, 1:-1], t, dim=-1)).mean() for s, t in pairs]).mean().item()


def test_distillation_beyond_the_table_matches_a_window_by_window_computation(model_type):
    teacher = AutoModel.from_config(tiny_config(model_type)).eval()
    tisa = tisa_hf.TisaConfig(num_kernels=2, mode="replace", init="random")
    student = AutoModel.from_config(tisa_hf.tisa_model_config(teacher.config, tisa))
    student.load_state_dict(teacher.state_dict(), strict=False)
    table = model_table_length(teacher)
    input_ids = torch.randint(5, 99, (2, 2 * table + 7))
    input_ids[:, 0], input_ids[:, -1] = 2, 3
    for layers in ("last", "all"):
        objective = DistillationObjective(student.eval(), teacher, table, layers, "cosine")
        output = objective(input_ids)
        expected = reference_loss(student, teacher, input_ids, table, layers)
        assert output.loss.item() == pytest.approx(expected, rel=1e-5) and expected > 1e-3
        assert output.counts.tolist() == [input_ids.shape[1] - 2] * 2  # [CLS] and [SEP] have no target
        assert output.sums.sum().item() / output.counts.sum().item() == pytest.approx(expected, rel=1e-5)
    within = input_ids[:, :table]  # at the table's length the teacher reads the block whole, every token compared
    assert DistillationObjective(student, teacher, table, "last", "cosine")(within).counts.tolist() == [table] * 2
