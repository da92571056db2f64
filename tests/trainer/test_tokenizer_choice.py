"""One resolver chooses every tokenizer (resolve_tokenizer): each case, and the errors for names it
does not know."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentgym.errors import ConfigError
from agentgym.tokenizers import ByteTokenizer, HFTokenizer
from agentgym.trainer.model.files import save_tokenizer
from agentgym.trainer.model.gptoss import build_tiny_for, resolve_tokenizer, tokenizer_source

BYTE_VOCAB = ByteTokenizer().vocab_size  # 264


def test_a_tiny_model_gets_the_byte_tokenizer_and_a_built_in_name_gets_that_one() -> None:
    for model, spec in [("tiny", "auto"), ("tiny:byte", "auto"), ("tiny", "byte"), ("any/hub-id", "byte")]:
        tok = resolve_tokenizer(model, spec)
        assert isinstance(tok, ByteTokenizer) and tok.vocab_size == BYTE_VOCAB, (model, spec)
    assert tokenizer_source("tiny") is None and tokenizer_source("some/model", "byte") is None
    assert tokenizer_source("some/model") == "some/model" and tokenizer_source("tiny", "./tok") == "./tok"


def test_a_model_folder_without_tokenizer_files_is_read_as_the_byte_tokenizer_when_its_vocabulary_fits(
        tmp_path: Path) -> None:
    """What agentgym-train saves for a tiny model (no tokenizer files), as agentgym-eval and
    model.name=FOLDER find it; a vocabulary of another size is refused with the way out."""
    build_tiny_for(ByteTokenizer()).save_pretrained(tmp_path / "byte")
    assert isinstance(resolve_tokenizer(str(tmp_path / "byte")), ByteTokenizer)  # config.json's vocab_size
    assert isinstance(resolve_tokenizer(str(tmp_path), vocab_size=BYTE_VOCAB), ByteTokenizer)
    with pytest.raises(ConfigError, match=r"no tokenizer files and a vocabulary of 1000 .*has 264.*model.tokenizer"):
        resolve_tokenizer(str(tmp_path), vocab_size=1000)


def test_a_folder_with_hugging_face_tokenizer_files_is_loaded(tmp_path: Path) -> None:
    pytest.importorskip("openai_harmony", reason="pip install 'agentgym-suite[harmony]'")
    gptoss = resolve_tokenizer("tiny", "o200k_harmony")
    assert gptoss.vocab_size == 201_088 and resolve_tokenizer("tiny:gpt-oss") is gptoss
    assert save_tokenizer(gptoss, tmp_path)  # what a checkpoint of a tiny:o200k_harmony run holds
    for model, spec in [(str(tmp_path), "auto"), ("tiny", str(tmp_path))]:
        tok = resolve_tokenizer(model, spec)
        assert isinstance(tok, HFTokenizer) and tok.vocab_size == 201_088


@pytest.mark.parametrize(("model", "spec", "needle"), [
    ("tiny:bytes", "auto", r"unknown tiny model 'tiny:bytes'.*\['byte', 'gpt-oss', 'o200k_harmony'\]"),
    ("tiny", "bytes", r"unknown tokenizer 'bytes'; did you mean 'byte'\?"),
    ("tiny", "gpt_oss", r"did you mean 'gpt-oss'\?"),
    ("tiny", "no-such-tokenizer-anywhere", r"'no-such-tokenizer-anywhere' cannot be used: .*one of \['byte'"),
])
def test_an_unknown_name_is_a_config_error_with_the_known_names(model: str, spec: str, needle: str,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # tests address loopback only: no hub look-up
    with pytest.raises(ConfigError, match=needle):
        resolve_tokenizer(model, spec)
    if "did you mean" in needle:  # the run's preflight says so too, before any hub look-up
        with pytest.raises(ConfigError, match=needle):
            tokenizer_source(model, spec)
