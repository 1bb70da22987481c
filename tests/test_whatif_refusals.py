"""What the what-if engine will not print: a replay that never delivered,
and the groups it reads the way `tracekit ablation` does."""

import os

import pytest

from tracekit.core.errors import TracekitError
from tracekit.whatif.tcp import MAX_TIME, Conn, Path, Transfer

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RTT, RATE, MSS = 0.05, 10e6 / 8, 1448


class NoLoss:
    def random(self):
        return 0.99


def test_an_idle_bottleneck_passes_a_packet_larger_than_its_queue():
    """A queue read (or guessed: 0.4 BDP of a loopback capture's round trip)
    smaller than one packet dropped every packet, and the transfer stopped at
    the replay's limit; a bottleneck with nothing queued serves what comes.
    Closed form: one segment, half a round trip and its serialisation."""
    c = Conn(cc="cubic")
    c.srtt, c.rttvar, c.min_rtt = RTT, RTT / 2, RTT
    path = Path(rtt=RTT, rate=RATE, queue_bytes=10, loss=0.0)
    t = Transfer(c, path, 1, MSS, NoLoss()).run()
    assert t == pytest.approx(RTT / 2 + (MSS + 52) / RATE, abs=1e-9)
    # ten at once: the first is served, the rest find it queued and are lost
    # and sent again, one at a time: late, but delivered
    assert Transfer(Conn(cc="cubic"), path, 10, MSS, NoLoss()).run() < MAX_TIME


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """Six requests of one capture (four on fresh connections, two reused), no
    event log, labelled with the rate alone."""
    import tracekit
    path = str(tmp_path_factory.mktemp("refusals") / "s.duckdb")
    with tracekit.open(path) as s:
        s.ingest([os.path.join(ROOT, "captures", "http-fresh-vs-persistent.pcap")],
                 labels={"rate_mbps": "20"})
        s.analyze()
        yield s


def test_a_replay_that_never_delivers_is_refused_not_printed(store):
    """90 % loss at 0.1 Mbit/s: a 355 kB response does not arrive within the
    replay's limit; the engine used to print the limit (120,000 ms) as the
    predicted time."""
    with pytest.raises(TracekitError, match=r"^rate_mbps=20: a replayed response did not arrive "
                                            r"within 120 s.*rate 0\.10 Mbit/s.*loss 90\.0%"):
        store.whatif({"loss_down": 0.9, "rate_mbps": 0.1}, where={"rate_mbps": "20"}, draws=8)


def test_whatif_groups_and_selects_by_a_requests_columns_as_ablation_does(store):
    """--by and --where name a request's attributes (labels, its events'
    fields, its columns: request_attributes.sql), in whatif as in ablation:
    `connection` here is the column, fresh or reused (no label says it)."""
    from tracekit.presentation.whatif import groups
    from tracekit.whatif.calibrate import load_requests
    assert groups(store.con, {}, ["connection"]) == [{"connection": "fresh"},
                                                     {"connection": "reused"}]
    assert len(load_requests(store.con, {"connection": "reused"})) == 2
    assert len(load_requests(store.con, {"connection": "fresh", "rate_mbps": "20"})) == 4
    results = store.whatif({"rtt_ms": 20}, by=("connection",), draws=8)
    assert [(g["connection"], len(r.measured_source)) for g, r in results] == [("fresh", 4),
                                                                              ("reused", 2)]
    with pytest.raises(TracekitError, match="with vantage=nowhere|no requests match vantage"):
        store.whatif({"rtt_ms": 20}, where={"vantage": "nowhere"}, draws=8)


def test_a_store_an_older_tracekit_analysed_is_asked_to_be_analysed_again(tmp_path):
    """request_attributes is newer than the stores made before it: the library
    and the commands say to run analyze (which creates it and rebuilds nothing
    else), not DuckDB's catalog error."""
    import tracekit
    path = str(tmp_path / "old.duckdb")
    with tracekit.open(path) as s:
        s.ingest([os.path.join(ROOT, "captures", "http-fresh-vs-persistent.pcap")])
        s.analyze()
        s.con.execute("DROP VIEW request_attributes")
        for call in (lambda: s.whatif({"rtt_ms": 20}, draws=8),
                     lambda: s.comparisons("connection"), lambda: s.report()):
            with pytest.raises(TracekitError, match=r"analysed by an older tracekit \(it has no "
                                                    r"request_attributes\); run: tracekit analyze"):
                call()
        built = [r.table for r in s.analyze() if getattr(r, "built", 0)]
        assert built == ["request_attributes"]
        assert len(s.comparisons("connection")[0].arms) == 2


def test_a_capture_and_a_log_are_attributes_by_their_file_names(store):
    """Runs made by hand compare by file, unlabelled: `capture` (and `log`)
    is the file a request was found in; a label of that name would win."""
    from tracekit.presentation.whatif import groups
    from tracekit.whatif.calibrate import load_requests
    assert groups(store.con, {}, ["capture"]) == [{"capture": "http-fresh-vs-persistent.pcap"}]
    assert len(load_requests(store.con, {"capture": "http-fresh-vs-persistent.pcap"})) == 6
    assert len(load_requests(store.con, {"capture": "another.pcap"})) == 0
    (logs,), = store.con.execute("SELECT count(*) FROM request_attributes "
                                 "WHERE attrs['log'] IS NOT NULL").fetchall()
    assert logs == 0  # (no event log here)


def test_the_target_is_measured_where_a_column_carries_its_level(store):
    """--set connection=fresh for the reused requests: the fresh ones of the
    same capture are the target's measurement (their `connection` column: no
    label says it), as `ablation --compare connection` pairs them; the
    target's runs used to be looked up among labels alone."""
    [(_, r)] = store.whatif({"connection": "fresh"}, where={"connection": "reused"}, draws=8)
    assert len(r.measured_source) == 2
    assert r.measured_target is not None and len(r.measured_target) == 4
    # and the other way: the factor's `persistent` is the column's `reused`
    [(_, r)] = store.whatif({"connection": "persistent"}, where={"connection": "fresh"}, draws=8)
    assert len(r.measured_source) == 4 and len(r.measured_target) == 2
    assert "target's 1 runs" in r.workload  # (their warm-up read from them, not the default)


def test_an_interval_is_printed_rounded_outwards():
    """A point prediction of 258.54 ms at its interval's lower edge printed as
    258.5 beside "259..347": outside it. Each edge rounds away from the inside."""
    from tracekit.presentation.whatif import _pair
    assert _pair((0.25854, 0.3468)) == "258..347"
    assert _pair((-0.0413, -0.0052)) == "-42..-5"
    assert _pair(None) is None


def test_a_view_an_older_tracekit_created_is_asked_to_be_created_again(tmp_path):
    """request_attributes gained `capture` and `log`: a store whose view an
    older version of its SQL created said "no requests match ... with
    capture" and never to run analyze. The version analyze recorded says so."""
    import tracekit
    with tracekit.open(str(tmp_path / "old.duckdb")) as s:
        s.ingest([os.path.join(ROOT, "captures", "http-fresh-vs-persistent.pcap")])
        s.analyze()
        s.con.execute("UPDATE analysis_runs SET version = 'older' "
                      "WHERE analysis = 'request_attributes'")
        with pytest.raises(TracekitError, match=r"analysed by an older tracekit \(it has an "
                                                r"older request_attributes\); run: tracekit analyze"):
            s.whatif({"rtt_ms": 20}, by=("capture",), draws=8)
        assert [r.table for r in s.analyze() if getattr(r, "built", 0)] == ["request_attributes"]
        assert len(s.whatif({"rtt_ms": 20}, by=("capture",), draws=8)) == 1


def test_two_captures_of_one_name_are_told_apart_by_their_paths(tmp_path):
    """Runs made by hand often sit in a folder each, every one a client.pcap:
    by name alone they were one group. Where two files share a name the
    attribute is the path; a label named `capture` still wins."""
    import shutil

    import tracekit
    from tracekit.presentation.whatif import groups
    paths = []
    for folder, name in (("a", "http-fresh-vs-persistent.pcap"), ("b", "lossy-download-client.pcap"),
                         ("c", "streaming-stalls-client.pcap")):
        os.makedirs(tmp_path / folder)
        paths.append(str(tmp_path / folder / "client.pcap"))
        shutil.copy(os.path.join(ROOT, "captures", name), paths[-1])
    with tracekit.open(str(tmp_path / "s.duckdb")) as s:
        s.ingest(paths[:2])
        s.ingest(paths[2:], labels={"capture": "mine"})
        s.analyze()
        assert groups(s.con, {}, ["capture"]) == [{"capture": p} for p in sorted(paths[:2])] + [
            {"capture": "mine"}]
