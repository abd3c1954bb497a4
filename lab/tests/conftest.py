"""The lab's tests: the same fixtures and launch helpers as ``tests/`` (``tests/launch.py``,
``tests/test_plan_calibrate.py``'s profile), which this puts on ``sys.path``."""

import sys
from pathlib import Path

import pytest

from gossipgrad import settings as settings_module

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests"))


@pytest.fixture(autouse=True)
def fresh_settings():
    """Each test reads the environment afresh (as ``tests/conftest.py``)."""
    settings_module.settings.cache_clear()
    yield
    settings_module.settings.cache_clear()
