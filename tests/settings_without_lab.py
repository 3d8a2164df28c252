"""The project's settings without the lab app: the product as a deployment that does
not install the lab runs it (tests/test_engine_boundaries.py starts it in subprocesses)."""

from agentops.settings import *  # noqa: F403 - the settings this module narrows
from agentops.settings import INSTALLED_APPS

INSTALLED_APPS = [app for app in INSTALLED_APPS if app != "lab"]
