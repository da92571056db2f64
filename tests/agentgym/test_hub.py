"""Pretrained names fail fast when they cannot load: no minute of hub retries offline."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from agentgym import ConfigError, TokenizerError, as_tokenizer
from agentgym.hub import pretrained_kwargs


@pytest.fixture
def empty_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    return tmp_path / "hf" / "hub"


def _fast(fn, *args, within: float = 1.5):  # type: ignore[no-untyped-def]
    try:
        import transformers  # noqa: F401  (its first import alone takes seconds: not what is timed)
    except ImportError:
        pass
    t0 = time.monotonic()
    try:
        return fn(*args)
    finally:
        assert time.monotonic() - t0 < within, f"took {time.monotonic() - t0:.1f} s"


@pytest.mark.parametrize("path", ["/nonexist/tok", "./no/such", "~/no-such-dir-agentgym", "a/b/c"])
def test_a_missing_path_is_no_such_directory_not_a_bad_hub_id(path: str) -> None:
    pytest.importorskip("transformers")
    with pytest.raises(TokenizerError, match=r"no such directory"):
        _fast(as_tokenizer, path)


def test_a_hub_id_that_is_not_cached_fails_at_once_offline(empty_cache: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("transformers")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(TokenizerError, match=r"'gpt2' is not a local folder and not in the Hugging Face cache.*"
                                             r"HF_HUB_OFFLINE is set"):
        _fast(as_tokenizer, "gpt2")


def test_an_unreachable_hub_is_found_in_one_probe(empty_cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # discard port: nothing listens
    with pytest.raises(ConfigError, match=r"127.0.0.1:9 cannot be reached"):
        _fast(pretrained_kwargs, "openai/gpt-oss-20b", "model")


def test_a_cached_hub_id_loads_from_the_cache_when_the_hub_is_off(empty_cache: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    (empty_cache / "models--openai--gpt-oss-20b").mkdir(parents=True)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert pretrained_kwargs("openai/gpt-oss-20b", "model") == {"local_files_only": True}
    assert pretrained_kwargs(str(empty_cache), "model") == {}  # a folder is used as it is


def test_the_trainer_reports_a_missing_model_folder_at_once() -> None:
    pytest.importorskip("torch")
    from agentgym.trainer.model.gptoss import load_policy

    with pytest.raises(ConfigError, match="model '/nonexist/model': no such directory"):
        _fast(load_policy, "/nonexist/model")
