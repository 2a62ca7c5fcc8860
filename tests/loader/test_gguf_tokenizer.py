"""``specdec.loader.gguf_tokenizer``: a tiny GGUF's tokenizer encodes as its vocabulary says,
with the chat template's and the file's end tokens as EOS (the synthetic GGUF of
tests/loader/test_api.py)."""

from __future__ import annotations

from gguf import GGMLQuantizationType as Q

from specdec.loader import load

from .test_api import _vocab, write_tiny_gguf


def test_synthetic_tokenizer_and_eos(tmp_path, tmp_cache):
    path = tmp_path / "tok.gguf"
    write_tiny_gguf(path, "qwen2", qtypes=(Q.F16,))
    _, tok = load(str(path))
    vocab = _vocab()
    # <|im_end|> from the chat template, <|endoftext|> as the file's EOS (and Qwen's rule)
    assert tok.eos_token_ids == {vocab.index("<|im_end|>"), vocab.index("<|endoftext|>")}
    assert tok.encode(" t") == [vocab.index("Ġt")]
    assert tok.encode("the") == [vocab.index("t"), vocab.index("he")]
    assert tok.encode("<|im_end|>") == [vocab.index("<|im_end|>")]
    assert tok.chat_template is not None
