"""LoRA (PEFT) on a TISA model, with the kernels trained through `modules_to_save`."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoModel

from tests.fixtures import tiny_config

peft = pytest.importorskip("peft")


def test_lora_with_trainable_kernels_trains_saves_and_reloads(tmp_path):
    base = AutoModel.from_config(tiny_config("bert", tisa={"num_kernels": 2, "init": "random"}))
    base.save_pretrained(tmp_path / "base")
    config = peft.LoraConfig(r=4, target_modules=["query", "value"], modules_to_save=["tisa"])
    model = peft.get_peft_model(AutoModel.from_pretrained(tmp_path / "base"), config)

    trainable = {name: p for name, p in model.named_parameters() if p.requires_grad}
    lora = [name for name in trainable if ".lora_" in name]
    kernels = [name for name in trainable if ".tisa.modules_to_save." in name]
    assert sorted(lora + kernels) == sorted(trainable)
    assert len(lora) == 2 * 2 * 3  # A and B of query and value in 3 layers
    assert sum(trainable[name].numel() for name in kernels) == 3 * 2 * 4 * 3  # 3·S·H·L

    original = {name: p.detach().clone() for name, p in model.base_model.model.tisa.original_module.named_parameters()}
    optimizer = torch.optim.AdamW(trainable.values(), lr=1e-2)
    input_ids = torch.randint(1, 99, (2, 9))
    for _ in range(3):
        model(input_ids=input_ids).last_hidden_state.square().mean().backward()
        optimizer.step()
        optimizer.zero_grad()
    trained = model.base_model.model.tisa.modules_to_save["default"]
    assert all(not torch.equal(getattr(trained, name), value) for name, value in original.items())
    frozen = model.base_model.model.tisa.original_module
    assert all(torch.equal(getattr(frozen, name), value) for name, value in original.items())

    model.eval()
    with torch.no_grad():
        expected = model(input_ids=input_ids).last_hidden_state
    model.save_pretrained(tmp_path / "adapter")
    reloaded = peft.PeftModel.from_pretrained(AutoModel.from_pretrained(tmp_path / "base"), tmp_path / "adapter")
    with torch.no_grad():
        got = reloaded.eval()(input_ids=input_ids).last_hidden_state
    torch.testing.assert_close(got, expected, rtol=0, atol=0)
    with torch.no_grad(), reloaded.disable_adapter():
        without = reloaded(input_ids=input_ids).last_hidden_state
    assert (without - expected).abs().max() > 1e-5  # the adapter, kernels included, is what made the difference
