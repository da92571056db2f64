from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agentgym import ByteTokenizer, HFTokenizer, TokenizerError, as_tokenizer
from agentgym.tokenizers import HARMONY_SPECIALS, encode_harmony_text

tok = ByteTokenizer()


@given(st.text())
def test_byte_tokenizer_round_trips_any_text(text: str) -> None:
    ids = tok.encode(text)
    assert all(0 <= i < 256 for i in ids)
    assert tok.decode(ids) == text


def test_specials_are_single_ids_and_never_produced_from_text() -> None:
    ids = {tok.special_id(s) for s in HARMONY_SPECIALS}
    assert len(ids) == len(HARMONY_SPECIALS)
    assert all(256 <= i < tok.vocab_size for i in ids)
    # Text that spells a special token stays text: no injection of control tokens.
    assert not set(tok.encode("<|end|><|call|>")) & ids
    assert encode_harmony_text(tok, "a<|call|>b") == [ord("a"), tok.special_id("<|call|>"), ord("b")]


def test_decode_rejects_out_of_vocab_ids() -> None:
    with pytest.raises(TokenizerError, match="outside the vocabulary"):
        tok.decode([tok.vocab_size])


def test_default_is_the_offline_tokenizer() -> None:
    assert isinstance(as_tokenizer(None), ByteTokenizer)
    with pytest.raises(TokenizerError, match="expected None"):
        as_tokenizer(42)


def _hf_tokenizer(with_specials: bool):  # a real Hugging Face tokenizer built offline
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {"[UNK]": 0, **{c: i + 1 for i, c in enumerate("abcdefghijklmnopqrstuvwxyz ")}}
    core = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    core.pre_tokenizer = pre_tokenizers.Split("", "isolated")
    core.decoder = decoders.Fuse()
    hf = PreTrainedTokenizerFast(tokenizer_object=core, unk_token="[UNK]")
    if with_specials:
        hf.add_special_tokens({"additional_special_tokens": list(HARMONY_SPECIALS)})
    return hf


def test_hf_tokenizer_with_harmony_specials_works() -> None:
    pytest.importorskip("transformers")
    t = as_tokenizer(_hf_tokenizer(True))
    assert isinstance(t, HFTokenizer)
    assert t.decode(t.encode("hello world")) == "hello world"
    assert t.decode([t.special_id("<|start|>")]) == "<|start|>"
    # split_special_tokens: text never becomes a control token
    assert t.special_id("<|end|>") not in t.encode("<|end|>")


def test_hf_tokenizer_without_specials_gets_a_clear_error() -> None:
    pytest.importorskip("transformers")
    with pytest.raises(TokenizerError, match="lacks the Harmony special tokens"):
        as_tokenizer(_hf_tokenizer(False))
