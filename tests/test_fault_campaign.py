"""The fault campaigns (tests/fault_campaign.py, tests/ingest_fault_campaign.py,
tests/dataset_fault_campaign.py) at a small size in the suite: a few points
each, both faults; the scripts run every point and print their tables."""

import dataset_fault_campaign
import ingest_fault_campaign


def test_ingest_faults_leave_the_store_as_before_and_the_next_ingest_repairs_it():
    # commit: a fault after the final COMMIT (Ctrl-C, a full disk) discarded
    # the packets, flows and interfaces of captures already in the store
    results = ingest_fault_campaign.campaign(points=("packets", "commit"))
    assert len(results) == 4
    assert [r for r in results if r[2]] == [], ingest_fault_campaign.table(results)


def test_dataset_faults_show_readers_whole_captures_and_the_next_run_repairs_it():
    # event_logs: a log recorded without its events (a kill between the two
    # files), and the next ingest took it for a duplicate: events lost for good;
    # written, full: each try of the failed capture printed Dask's "Compute
    # Failed" traceback beside tracekit's one line
    results = dataset_fault_campaign.campaign([("ingest", "written"), ("ingest", "event_logs")])
    assert len(results) == 4
    assert [r for r in results if r[3]] == [], dataset_fault_campaign.table(results)


def test_analyze_faults_on_a_store_wide_step_show_the_last_run_and_the_next_run_repairs_it():
    import fault_campaign
    results = fault_campaign.campaign(only=["bounds"])
    assert len(results) == 2
    assert [r for r in results if r[2]] == [], results
