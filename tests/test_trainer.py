"""A model loaded with `tisa=` trains with transformers' `Trainer`: the kernels are in its optimizer and move, and
the saved model reloads with the same logits."""

import torch
from transformers import AutoModelForSequenceClassification, BertForSequenceClassification

import tisa_hf
from tests.fixtures import FirstTokenTask, short_trainer, tiny_config


def test_trainer_trains_saves_and_reloads_a_tisa_model(tmp_path):
    config = tiny_config("bert", vocab_size=50, num_hidden_layers=2, num_labels=2)
    BertForSequenceClassification(config).save_pretrained(tmp_path / "pretrained")
    tisa = tisa_hf.TisaConfig(num_kernels=2, init="random")
    model = AutoModelForSequenceClassification.from_pretrained(tmp_path / "pretrained", tisa=tisa)
    start = {name: value.detach().clone() for name, value in model.base_model.tisa.named_parameters()}
    trainer = short_trainer(model, FirstTokenTask(), tmp_path / "trainer", max_steps=4)
    trainer.train()

    optimized = {id(parameter) for group in trainer.optimizer.param_groups for parameter in group["params"]}
    kernels = dict(model.base_model.tisa.named_parameters())
    assert sorted(kernels) == ["amplitude", "center", "sharpness"]
    assert all(id(parameter) in optimized for parameter in kernels.values())
    assert all(not torch.equal(start[name], kernels[name].detach()) for name in kernels)

    trainer.save_model(str(tmp_path / "saved"))
    reloaded = AutoModelForSequenceClassification.from_pretrained(tmp_path / "saved").eval()
    assert tisa_hf.tisa_config_of(reloaded) == tisa
    inputs = FirstTokenTask().inputs[:4]
    with torch.no_grad():
        assert torch.equal(model.eval()(input_ids=inputs).logits, reloaded(input_ids=inputs).logits)
