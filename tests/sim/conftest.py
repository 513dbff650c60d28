import pytest

from loadgen.sim.process import SimProcess

# One simulator per mode for the whole session: starting one costs ~0.5 s of a busy 2-core machine.
SCALE = 20.0


@pytest.fixture(scope="session")
def baseline_sim(live):
    with SimProcess(profile="pcie-8gpu-eagle3", mode="baseline", time_scale=SCALE, seed=1) as sim:
        yield sim


@pytest.fixture(scope="session")
def spec_sim(live):
    with SimProcess(profile="pcie-8gpu-eagle3", mode="spec", time_scale=SCALE, seed=1) as sim:
        yield sim
