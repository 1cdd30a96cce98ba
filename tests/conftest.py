"""Shared fixtures: the local GSM8K copy beside the repo and the embedded model, loaded once."""

from __future__ import annotations

import pytest

from azlib.data.gsm8k import LOCAL_DEFAULT


@pytest.fixture(scope="session")
def gsm8k_dir():
    assert (LOCAL_DEFAULT / "test.jsonl").is_file(), f"tests need the GSM8K copy at {LOCAL_DEFAULT}"
    return LOCAL_DEFAULT


@pytest.fixture(scope="session")
def embedded():
    from azlib.models import DEFAULT_MODEL, load_model

    return load_model(DEFAULT_MODEL)
