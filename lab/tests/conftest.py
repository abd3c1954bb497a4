"""The lab's tests: the same fixtures and helpers as ``tests/`` (``tests/support/``: the
launch helpers, the planner's small profile), which this puts on ``sys.path``."""

import sys
from pathlib import Path

import pytest

from gossipgrad import settings as settings_module

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests" / "support"))


@pytest.fixture(autouse=True)
def fresh_settings():
    """Each test reads the environment afresh (as ``tests/conftest.py``)."""
    settings_module.settings.cache_clear()
    yield
    settings_module.settings.cache_clear()
