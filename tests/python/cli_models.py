"""Models the command-line tests import by path (`cli_models:...`, with PYTHONPATH set)."""

import torch
from torch import nn


class Doubler(nn.Module):
    """A leaf without a module formula: module-formula totals become partial."""

    def forward(self, x):
        return x * 2


def unsupported():
    return nn.Sequential(nn.Linear(4, 8), Doubler())


def many_unsupported():
    return nn.Sequential(*(Doubler() for _ in range(6)))


def supported():
    """unsupported() with a supported leaf instead, and one more layer: complete, to compare with."""
    return nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))


class Broken(nn.Module):
    def forward(self, x):
        raise ValueError("this model rejects every input")


class TwoInputs(nn.Module):
    def __init__(self):
        super().__init__()
        self.image = nn.Conv2d(3, 4, 3)
        self.side = nn.Linear(5, 4)

    def forward(self, image, side):
        return self.image(image).mean((2, 3)) + self.side(side)


def not_a_module():
    return torch.zeros(3)


instance = nn.Linear(6, 2)


def _hugging_face(config_name, model_name, **config):
    import transformers

    torch.manual_seed(0)
    return getattr(transformers, model_name)(getattr(transformers, config_name)(**config)).eval()


_TRANSFORMER = {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2, "intermediate_size": 64}


def bert_small():
    return _hugging_face("BertConfig", "BertModel", vocab_size=100, max_position_embeddings=64, **_TRANSFORMER)


def gpt2_small():
    return _hugging_face(
        "GPT2Config",
        "GPT2Model",
        n_embd=32,
        n_layer=2,
        n_head=2,
        vocab_size=100,
        n_positions=64,
        bos_token_id=0,
        eos_token_id=0,
    )


def llama_small():
    return _hugging_face(
        "LlamaConfig", "LlamaModel", num_key_value_heads=1, vocab_size=100, max_position_embeddings=64, **_TRANSFORMER
    )


def vit_small():
    return _hugging_face("ViTConfig", "ViTModel", image_size=32, patch_size=8, **_TRANSFORMER)


# A name longer than any table column, to see it cut (--width) or whole (piped output).
LONG_NAME = "a_submodule_with_a_name_much_longer_than_the_layer_column_allows"


def long_names():
    model = nn.Sequential()
    model.add_module(LONG_NAME, nn.Sequential(nn.Linear(4, 4), nn.BatchNorm1d(4)))
    return model


class SparseDoubler(nn.Module):
    """Work on a sparse tensor that no formula prices: operator FLOPs are partial."""

    def forward(self, x):
        return torch.sparse.sum(x.to_sparse() * 2)


def escape_names():
    """A submodule whose name holds a terminal escape sequence (ANSI red), and a Doubler so that
    a diagnostic names it too."""
    model = nn.Sequential()
    model.add_module("\x1b[31mred", nn.Linear(4, 4))
    model.add_module("\x1b[0mplain", Doubler())
    return model
