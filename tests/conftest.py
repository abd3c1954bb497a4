"""Shared fixtures: each test reads the environment afresh.

``gossipgrad.settings.settings()`` caches the environment on first use (a
process reads it once); tests that set variables with ``monkeypatch.setenv``
need the cache dropped around them so one test's environment never leaks into
the next.
"""

import pytest

from gossipgrad import settings as settings_module


@pytest.fixture(autouse=True)
def fresh_settings():
    settings_module.settings.cache_clear()
    yield
    settings_module.settings.cache_clear()


@pytest.fixture
def cli_names():
    """Messages spell options as command-line flags (``--max-lag 2``), as under the CLI."""
    from gossipgrad.choices import cli_names as spelled_as_flags

    with spelled_as_flags():
        yield
