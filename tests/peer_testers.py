"""The model testers transformers' common suite runs on (`tests/test_peer_suite.py`): tiny configs and inputs of each
supported architecture, and the `create_and_check_*` methods of its heads, for the stock classes or their TISA
classes in one mode. transformers' own testers live beside its per-model tests, which its sdist leaves out."""

from __future__ import annotations

from dataclasses import dataclass

import torch
import transformers
from transformers import AutoConfig, PreTrainedModel

import tisa_hf
from tests.fixtures import TINY_SIZES, tiny_config

# Every head a BERT-era architecture has, each checked by its per-model test (`create_and_check_<name>`).
HEAD_CHECKS = {
    "Model": "model",
    "ForMaskedLM": "for_masked_lm",
    "ForSequenceClassification": "for_sequence_classification",
    "ForTokenClassification": "for_token_classification",
    "ForQuestionAnswering": "for_question_answering",
    "ForMultipleChoice": "for_multiple_choice",
}
# NomicBERT, GTE and EuroBERT have no question-answering or multiple-choice head.
ROTARY_HEADS = tuple(HEAD_CHECKS)[:4]


@dataclass(frozen=True)
class Architecture:
    """An architecture by transformers' class names: their prefix, its causal LM head (None: it has none), and
    whether it takes token type ids."""

    model_type: str
    prefix: str
    causal_lm: str | None = None
    token_types: bool = True
    hidden_size_name: str = "hidden_size"  # as the config's JSON names it
    heads: tuple[str, ...] = tuple(HEAD_CHECKS)  # the heads transformers has for it, besides the causal LM
    rotary: bool = False  # rotary position embeddings, no position table (its tiny config: `rotary_tiny_config`)
    # The hidden size `ConfigTester` builds the config with, beside the default heads (12): EuroBERT's config refuses
    # one they do not divide.
    config_tester_size: int = 37
    # Whether its classes run only with `-m slow`: NomicBERT's, GTE's and EuroBERT's, whose common suite costs
    # 1.2 to 2 times a BERT-era class's; ModernBERT, with its sliding-window layers, runs by default.
    slow: bool = False

    def common_heads(self) -> tuple[str, ...]:
        """The heads transformers' common suite runs on: the encoder alone, a head tied to its embeddings, a pooled
        head and the causal LM. Every head runs the same TISA encoder; each one's own check is a per-model test."""
        heads = ("Model", "ForMaskedLM", "ForSequenceClassification")
        return (*heads, self.causal_lm) if self.causal_lm else heads


ARCHITECTURES = (
    Architecture("bert", "Bert", "LMHeadModel"),
    Architecture("roberta", "Roberta", "ForCausalLM"),
    Architecture("xlm-roberta", "XLMRoberta", "ForCausalLM"),
    Architecture("albert", "Albert"),
    Architecture("electra", "Electra", "ForCausalLM"),
    Architecture("distilbert", "DistilBert", token_types=False, hidden_size_name="dim"),
    Architecture("modernbert", "ModernBert", token_types=False, rotary=True),
    Architecture("nomic_bert", "NomicBert", heads=ROTARY_HEADS, rotary=True, slow=True),
    Architecture("gte", "Gte", heads=ROTARY_HEADS, rotary=True, slow=True),
    Architecture(
        "eurobert", "EuroBert", token_types=False, heads=ROTARY_HEADS, rotary=True, config_tester_size=36, slow=True
    ),
)
# What the testers run: the stock classes, or the TISA classes in one mode.
VARIANTS = ("stock", "add", "replace")


def rotary_tiny_config(model_type: str, **overrides):
    """A tiny config of a RoPE architecture (`TINY_SIZES`, no dropout, the special tokens inside the vocabulary), with
    `overrides` on top. ModernBERT's alternates a global layer with a sliding-window one whose window (4 tokens, 2 a
    side) is shorter than the testers' sequences, so that the window matters."""
    sizes = {**TINY_SIZES, **overrides}
    if model_type == "modernbert":
        tokens = {"pad_token_id": 0, "bos_token_id": 1, "cls_token_id": 1, "eos_token_id": 2, "sep_token_id": 2}
        extra = {"global_attn_every_n_layers": 2, "local_attention": 4, **tokens}
    elif model_type == "gte":
        extra = {"hidden_dropout_prob": 0.0}
    elif model_type == "eurobert":
        extra = {"pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 2, "mask_token_id": 3}
    elif model_type == "nomic_bert":
        extra = {}
    else:
        raise ValueError(model_type)
    # By its model type: the config classes of NomicBERT, GTE and EuroBERT are missing from older transformers 5.x.
    return AutoConfig.for_model(model_type, **{**extra, **sizes})


def ids_tensor(shape: tuple[int, ...], vocab_size: int, generator: torch.Generator) -> torch.Tensor:
    return torch.randint(0, vocab_size, shape, generator=generator)


class EncoderModelTester:
    """Tiny configs and inputs of one architecture in one variant, and the checks of its heads."""

    batch_size, seq_length, num_labels, num_choices, type_vocab_size = 13, 7, 3, 4, 2
    is_training = True

    def __init__(self, parent, architecture: Architecture, variant: str):
        self.parent, self.architecture, self.variant = parent, architecture, variant
        plain = self.plain_config()
        self.vocab_size, self.hidden_size = plain.vocab_size, plain.hidden_size
        self.num_hidden_layers, self.num_attention_heads = plain.num_hidden_layers, plain.num_attention_heads
        self.generator = torch.Generator().manual_seed(0)

    def plain_config(self):
        sizes = {"num_hidden_layers": 2, "max_position_embeddings": 64}
        if self.architecture.token_types:
            sizes["type_vocab_size"] = self.type_vocab_size
        make = rotary_tiny_config if self.architecture.rotary else tiny_config
        return make(self.architecture.model_type, **sizes)

    def get_config(self):
        if self.variant == "stock":
            return self.plain_config()
        tisa = tisa_hf.TisaConfig(mode=self.variant, init="random", num_kernels=2)
        return tisa_hf.tisa_model_config(self.plain_config(), tisa)

    def model_class(self, head: str) -> type[PreTrainedModel]:
        model_class = getattr(transformers, self.architecture.prefix + head)
        return model_class if self.variant == "stock" else tisa_hf.modeling.tisa_model_class(model_class)

    def prepare_config_and_inputs(self) -> tuple:
        shape = (self.batch_size, self.seq_length)
        config = self.get_config()
        ids = ids_tensor(shape, self.vocab_size, self.generator)
        # No padding token among the ids, which an attention mask covers instead: RoBERTa numbers the positions of
        # input ids past their padding tokens, and those of input embeddings without (`test_inputs_embeds_matches_*`).
        ids[ids == config.pad_token_id] = config.pad_token_id + 1
        inputs = {"input_ids": ids}
        if self.architecture.token_types:
            inputs["token_type_ids"] = ids_tensor(shape, self.type_vocab_size, self.generator)
        mask = ids_tensor(shape, 2, self.generator)
        mask[:, -1] = 1  # every sequence has a token to attend to (transformers' `random_attention_mask`)
        inputs["attention_mask"] = mask
        labels = {
            "sequence": ids_tensor((self.batch_size,), self.num_labels, self.generator),
            "token": ids_tensor(shape, self.num_labels, self.generator),
            "choice": ids_tensor((self.batch_size,), self.num_choices, self.generator),
        }
        return config, inputs, labels

    def prepare_config_and_inputs_for_common(self) -> tuple:
        config, inputs, _ = self.prepare_config_and_inputs()
        return config, inputs

    def prepare_config_and_inputs_for_decoder(self) -> tuple:
        config, inputs, labels = self.prepare_config_and_inputs()
        config.is_decoder = True
        encoder_hidden_states = torch.randn(
            self.batch_size, self.seq_length, self.hidden_size, generator=self.generator
        )
        encoder_mask = ids_tensor((self.batch_size, self.seq_length), 2, self.generator)
        return config, inputs, labels, encoder_hidden_states, encoder_mask

    def built(self, head: str, config):
        return self.model_class(head)(config).eval()

    def create_and_check_model(self, config, inputs, labels):
        model = self.built("Model", config)
        result = model(**inputs)
        model(inputs["input_ids"])
        self.parent.assertEqual(result.last_hidden_state.shape, (self.batch_size, self.seq_length, self.hidden_size))

    def create_and_check_for_masked_lm(self, config, inputs, labels):
        result = self.built("ForMaskedLM", config)(**inputs, labels=labels["token"])
        self.parent.assertEqual(result.logits.shape, (self.batch_size, self.seq_length, self.vocab_size))
        self.parent.assertTrue(torch.isfinite(result.loss))

    def create_and_check_for_sequence_classification(self, config, inputs, labels):
        config.num_labels = self.num_labels
        result = self.built("ForSequenceClassification", config)(**inputs, labels=labels["sequence"])
        self.parent.assertEqual(result.logits.shape, (self.batch_size, self.num_labels))
        self.parent.assertTrue(torch.isfinite(result.loss))

    def create_and_check_for_token_classification(self, config, inputs, labels):
        config.num_labels = self.num_labels
        result = self.built("ForTokenClassification", config)(**inputs, labels=labels["token"])
        self.parent.assertEqual(result.logits.shape, (self.batch_size, self.seq_length, self.num_labels))

    def create_and_check_for_question_answering(self, config, inputs, labels):
        positions = labels["sequence"]
        result = self.built("ForQuestionAnswering", config)(
            **inputs, start_positions=positions, end_positions=positions
        )
        self.parent.assertEqual(result.start_logits.shape, (self.batch_size, self.seq_length))
        self.parent.assertEqual(result.end_logits.shape, (self.batch_size, self.seq_length))

    def create_and_check_for_multiple_choice(self, config, inputs, labels):
        config.num_choices = self.num_choices
        choices = {
            name: value.unsqueeze(1).expand(-1, self.num_choices, -1).contiguous() for name, value in inputs.items()
        }
        result = self.built("ForMultipleChoice", config)(**choices, labels=labels["choice"])
        self.parent.assertEqual(result.logits.shape, (self.batch_size, self.num_choices))

    def create_and_check_model_as_decoder(self, config, inputs, labels, encoder_hidden_states, encoder_mask):
        config.add_cross_attention = True
        model = self.built("Model", config)
        model(**inputs, encoder_hidden_states=encoder_hidden_states, encoder_attention_mask=encoder_mask)
        result = model(**inputs, encoder_hidden_states=encoder_hidden_states)
        self.parent.assertEqual(result.last_hidden_state.shape, (self.batch_size, self.seq_length, self.hidden_size))

    def create_and_check_for_causal_lm(self, config, inputs, labels, *encoder):
        result = self.built(self.architecture.causal_lm, config)(**inputs, labels=labels["token"])
        self.parent.assertEqual(result.logits.shape, (self.batch_size, self.seq_length, self.vocab_size))

    def create_and_check_for_causal_lm_as_decoder(self, config, inputs, labels, encoder_hidden_states, encoder_mask):
        config.add_cross_attention = True
        model = self.built(self.architecture.causal_lm, config)
        model(
            **inputs,
            labels=labels["token"],
            encoder_hidden_states=encoder_hidden_states,
            encoder_attention_mask=encoder_mask,
        )
        result = model(**inputs, labels=labels["token"], encoder_hidden_states=encoder_hidden_states)
        self.parent.assertEqual(result.logits.shape, (self.batch_size, self.seq_length, self.vocab_size))

    def create_and_check_decoder_model_past_large_inputs(
        self, config, inputs, labels, encoder_hidden_states, encoder_mask
    ):
        """Three new tokens on a KV cache give the hidden states of the same positions in a full pass."""
        config.add_cross_attention = True
        model = self.built(self.architecture.causal_lm, config)
        ids, mask = inputs["input_ids"], inputs["attention_mask"]
        encoder = {"encoder_hidden_states": encoder_hidden_states, "encoder_attention_mask": encoder_mask}
        past = model(ids, attention_mask=mask, use_cache=True, **encoder).past_key_values
        next_ids = ids_tensor((self.batch_size, 3), self.vocab_size, self.generator)
        next_mask = torch.cat([mask, ids_tensor((self.batch_size, 3), 2, self.generator)], dim=-1)
        full = model(torch.cat([ids, next_ids], -1), attention_mask=next_mask, output_hidden_states=True, **encoder)
        cached = model(next_ids, attention_mask=next_mask, past_key_values=past, output_hidden_states=True, **encoder)
        torch.testing.assert_close(cached.hidden_states[0], full.hidden_states[0][:, -3:], rtol=0, atol=1e-3)
        torch.testing.assert_close(cached.logits, full.logits[:, -3:], rtol=0, atol=1e-3)
