import pytest

from tests.cli.runner import loadgen


@pytest.fixture(scope="session")
def cli(live):
    """``cli(*args, timeout=600, cwd=None)``: the finished ``python -m loadgen ARGS``, stdout and stderr kept.
    Session-scoped, so a module's shared run (a module-scoped fixture) can request it too."""
    return loadgen
