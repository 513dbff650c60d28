"""Collects the measured coverage and error rates so they appear in every test run's summary."""

from __future__ import annotations

import pytest

MEASURED: list[str] = []


@pytest.fixture
def measured():
    """Call with a line of text to have it printed in the terminal summary."""
    return MEASURED.append


def pytest_terminal_summary(terminalreporter):
    if MEASURED:
        terminalreporter.section("loadgen.analysis.crossover: measured statistical properties")
        for line in MEASURED:
            terminalreporter.write_line(line)
