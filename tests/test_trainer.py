"""A model loaded with `tisa=` trains with transformers' `Trainer`: the kernels are in its optimizer and move, and
the saved model reloads with the same logits."""

import torch
from torch.utils.data import Dataset
from transformers import (
    AutoModelForSequenceClassification,
    BertForSequenceClassification,
    Trainer,
    TrainingArguments,
)

import tisa_hf
from tests.fixtures import tiny_config


class FirstTokenTask(Dataset):
    """Label 1 when the first token id is above 25: learnable in a few steps."""

    def __init__(self, size: int = 32):
        self.inputs = torch.randint(0, 50, (size, 12), generator=torch.Generator().manual_seed(1))

    def __len__(self) -> int:
        return len(self.inputs)

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        return {"input_ids": self.inputs[index], "labels": (self.inputs[index, 0] > 25).long()}


def test_trainer_trains_saves_and_reloads_a_tisa_model(tmp_path):
    config = tiny_config("bert", vocab_size=50, num_hidden_layers=2, num_labels=2)
    BertForSequenceClassification(config).save_pretrained(tmp_path / "pretrained")
    tisa = tisa_hf.TisaConfig(num_kernels=2, init="random")
    model = AutoModelForSequenceClassification.from_pretrained(tmp_path / "pretrained", tisa=tisa)
    start = {name: value.detach().clone() for name, value in model.base_model.tisa.named_parameters()}
    arguments = TrainingArguments(
        output_dir=str(tmp_path / "trainer"),
        max_steps=4,
        per_device_train_batch_size=8,
        learning_rate=1e-2,
        report_to=[],
        save_strategy="no",
        use_cpu=True,
        disable_tqdm=True,
    )
    trainer = Trainer(model=model, args=arguments, train_dataset=FirstTokenTask())
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
