"""A small run of the mutation campaign (tests/fuzz_campaign.py) in the suite:
real captures and logs, mutated with a fixed seed, each ingested and analysed.
Nothing ends in wrong data, an internal error or a leak."""

import pytest
from fuzz_campaign import campaign


@pytest.mark.slow
def test_mutants_of_real_input_end_in_ingested_or_refused():
    results, failures = campaign(captures=20, logs=20, seed=7)
    assert failures == []
    for kind in ("capture", "log"):
        counts = results[kind]
        assert sum(counts.values()) == 20
        assert counts["ingested"] > 0 and counts["refused"] + counts["ingested"] == 20
