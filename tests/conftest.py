"""Suite-wide rules and fixtures: a clean environment per test, PostgreSQL required where CI runs,
and the embedded model's file for the tests that run it."""

from __future__ import annotations

import os
from collections.abc import Generator, Iterator
from pathlib import Path

import pytest

from toolwire.models.local_model_files import ModelFileError, resolve_model_path

# Variables a developer may have set for their own use of toolwire; tests must not see them.
_KEEP = ("TOOLWIRE_TEST_",)


@pytest.fixture(autouse=True)
def clean_environ(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for name in list(os.environ):
        if name.startswith("TOOLWIRE_") and not name.startswith(_KEEP):
            monkeypatch.delenv(name)
    yield


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, object, None]:
    outcome = yield
    report = outcome.get_result()  # type: ignore[attr-defined]
    # Where PostgreSQL must be there (CI, or a developer who asks), a skip for its absence is a failure.
    required = os.environ.get("CI") == "true" or os.environ.get("TOOLWIRE_TEST_REQUIRE_POSTGRES") == "1"
    if required and report.skipped and "PostgreSQL" in str(report.longrepr):
        report.outcome = "failed"
        report.longrepr = f"PostgreSQL is required here but was skipped: {report.longrepr}"


@pytest.fixture(scope="session")
def model_path() -> Path:
    """The packaged embedded model's file, assembled on first use."""
    try:
        return resolve_model_path()
    except ModelFileError as exc:
        pytest.skip(f"the packaged model is not installed: {exc}")
