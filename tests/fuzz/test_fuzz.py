"""Fuzzing the loaders, ModelConfig, Mesh and the CLI with generated (mostly bad) inputs.

Every input must end in a valid result (which passes its own validation again) or a named
error (an ``ExplorerError`` subclass with a message; for the CLI, exit code 2 with one line
on stderr): never a builtin exception, never a hang. Examples are derandomized, so a run is
the same on every machine; ``bench/fuzz.py`` counts the outcomes.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, Phase, settings

from .interfaces import INTERFACES, fuzz_outcomes

#: Examples per interface: the whole folder ran in about 5 s on the shared 2-core box.
EXAMPLES = {
    "model_loader": 200,
    "hf_config": 200,
    "hardware_loader": 200,
    "model_config": 200,
    "mesh": 200,
    "cli": 100,
}
FUZZ = settings(
    derandomize=True,
    database=None,
    deadline=10_000,  # ms per case; a hard alarm in `outcome` catches real hangs
    phases=(Phase.explicit, Phase.generate, Phase.shrink),
    suppress_health_check=(HealthCheck.too_slow, HealthCheck.data_too_large,
                           HealthCheck.filter_too_much),
)  # fmt: skip


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_fuzz_interface(name, tmp_path_factory):
    seen = fuzz_outcomes(INTERFACES[name], EXAMPLES[name], tmp_path_factory.mktemp(name), FUZZ)
    # The generators must reach both sides, or the fuzzing proves little.
    assert {"valid", "named"} <= set(seen), (name, seen)
