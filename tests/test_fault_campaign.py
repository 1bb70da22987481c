"""The fault campaigns (tests/fault_campaign.py, tests/ingest_fault_campaign.py)
at a small size in the suite: a few points each, both faults; the scripts
run every point and print their tables."""

import ingest_fault_campaign


def test_ingest_faults_leave_the_store_as_before_and_the_next_ingest_repairs_it():
    # commit: a fault after the final COMMIT (Ctrl-C, a full disk) discarded
    # the packets, flows and interfaces of captures already in the store
    results = ingest_fault_campaign.campaign(points=("packets", "event_log", "commit"))
    assert len(results) == 6
    assert [r for r in results if r[2]] == [], ingest_fault_campaign.table(results)
