"""``core.vocab.vocab_size``: the model's own size first, never a guessed one."""

from __future__ import annotations

import mlx.nn as nn
import pytest
from conftest import TINY_VOCAB, cached_tiny

from specdec.core.vocab import vocab_size


class Tok:
    def get_vocab(self):
        return {f"t{i}": i for i in range(10)}


class Bare(nn.Module):
    pass


def test_args_first_then_the_output_rows_then_the_tokenizer():
    assert vocab_size(cached_tiny("llama"), Tok()) == TINY_VOCAB  # args win over the tokenizer

    class Positions(nn.Module):  # a GPT-2 layout: token and position tables, no args
        def __init__(self):
            super().__init__()
            self.wte, self.wpe = nn.Embedding(100, 8), nn.Embedding(16, 8)

    class Head(Positions):
        def __init__(self):
            super().__init__()
            self.lm_head = nn.Linear(8, 104)  # padded output rows

    assert vocab_size(Positions()) == 100 and vocab_size(Head()) == 104
    assert vocab_size(Bare(), Tok()) == 10


def test_an_unknown_size_is_an_error_not_a_guess():
    with pytest.raises(ValueError, match="vocabulary size of Bare.*no tokenizer"):
        vocab_size(Bare())
    with pytest.raises(ValueError, match="vocabulary size of object.*no get_vocab"):
        vocab_size(object(), object())
