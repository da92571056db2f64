from __future__ import annotations

import pytest
from hypothesis import given, settings
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


# ----------------------------------------------------------------------------- o200k_harmony
harmony_text = st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=120) | st.sampled_from(
    ["I'm THE’s WE'LL", "naïve café 日本語 👍🏽", "def f(x):\n\treturn x**2\r\n", "  <|end|>  ", "12345678.9e-3"])


@pytest.fixture(scope="module")
def gptoss():
    pytest.importorskip("openai_harmony", reason="pip install 'agentgym-suite[harmony]'")
    return as_tokenizer("o200k_harmony")


@pytest.fixture(scope="module")
def gptoss_hf(gptoss, tmp_path_factory):
    """o200k_harmony saved as Hugging Face files, loaded back through AutoTokenizer (~15 s)."""
    folder = gptoss.save_pretrained(tmp_path_factory.mktemp("o200k"))
    return as_tokenizer(str(folder))


@pytest.mark.harmony
def test_o200k_harmony_is_gptoss_tokenizer(gptoss) -> None:
    from agentgym.harmony_tokenizer import HarmonyTokenizer, harmony_encoding

    assert isinstance(gptoss, HarmonyTokenizer) and as_tokenizer("gpt-oss") is gptoss
    assert gptoss.vocab_size == 201_088 and gptoss.pad_id == 199_999
    ids = {s: gptoss.special_id(s) for s in HARMONY_SPECIALS}
    assert ids == {"<|start|>": 200006, "<|end|>": 200007, "<|message|>": 200008, "<|channel|>": 200005,
                   "<|constrain|>": 200003, "<|return|>": 200002, "<|call|>": 200012}
    assert gptoss.encode("hello world") == harmony_encoding().encode("hello world") == [24912, 2375]
    assert not set(gptoss.encode("<|end|><|call|>")) & set(ids.values())  # text stays text
    with pytest.raises(TokenizerError, match="outside the vocabulary"):
        gptoss.decode([201_088])


@pytest.mark.harmony
@settings(max_examples=200, deadline=None)
@given(harmony_text)
def test_hf_files_encode_and_decode_like_openai_harmony(gptoss, gptoss_hf, text: str) -> None:
    assert isinstance(gptoss_hf, HFTokenizer) and gptoss_hf.vocab_size == gptoss.vocab_size
    ids = gptoss.encode(text)
    assert gptoss_hf.encode(text) == ids
    assert gptoss_hf.decode(ids) == gptoss.decode(ids) == text
    for s in HARMONY_SPECIALS:
        assert gptoss_hf.special_id(s) == gptoss.special_id(s)


@pytest.mark.harmony
def test_hf_files_are_gptoss_tokenizer_files(gptoss_hf) -> None:
    """What transformers loads from the folder: 201,088 ids, GPT-OSS's pad/eos, reserved ids."""
    hf = gptoss_hf.hf
    assert len(hf) == 201_088 and hf.pad_token_id == 199_999 and hf.eos_token == "<|return|>"
    assert hf.convert_ids_to_tokens(201_087) == "<|reserved_201087|>"


@pytest.mark.harmony
def test_tampered_o200k_file_is_replaced(gptoss, tmp_path, monkeypatch) -> None:
    from agentgym import harmony_tokenizer as ht

    monkeypatch.setenv("AGENTGYM_CACHE", str(tmp_path))
    path = ht.o200k_base_file()
    assert ht._sha256(path) == ht.O200K_BASE_SHA256
    path.write_bytes(b"tampered")
    assert ht.o200k_base_file() == path and ht._sha256(path) == ht.O200K_BASE_SHA256


def test_missing_harmony_packages_say_how_to_install(monkeypatch) -> None:
    import sys

    from agentgym import harmony_tokenizer as ht

    monkeypatch.setitem(sys.modules, "openai_harmony", None)  # import fails as if not installed
    ht.harmony_encoding.cache_clear()
    try:
        with pytest.raises(TokenizerError, match=r"pip install 'agentgym-suite\[harmony\]'"):
            ht.harmony_encoding()
    finally:
        ht.harmony_encoding.cache_clear()


def test_misspelt_tokenizer_name_gets_did_you_mean() -> None:
    with pytest.raises(TokenizerError, match="did you mean 'o200k_harmony'"):
        as_tokenizer("o200k_harmoni")
