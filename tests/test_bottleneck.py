"""The bottleneck rate (tracekit/pipeline/steps/bottleneck.py) against rates someone set.

The lab's reference runs cross a path the emulator serves at 50 Mbit/s (IP
bytes); a path made here by hand -- two namespaces, a veth pair, a tbf token
bucket on the server's side at a known rate, python's http.server and curl,
tcpdump at both ends -- must read as the bucket's rate from either capture.
And whatever B is, the bound never exceeds a request's measured time, with or
without the runs' bottleneck_mbps labels, and a run's B does not depend on
what else shares the store.
"""

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

import tracekit
from tracekit.lab.netns import in_ns, stop
from tracekit.lab.record import tcpdump

ROOT = Path(__file__).resolve().parents[1]
LAB = ROOT / "captures" / "lab"


def _strip_rate_labels(con):
    for table in ("captures", "event_logs"):
        con.execute(f"UPDATE {table} SET labels = map_from_entries(list_filter(map_entries(labels), "
                    "lambda e: e.key NOT IN ('bottleneck_mbps', 'rate_mbps')))")
    con.execute("UPDATE event_logs SET updated_at = now()")


@pytest.fixture(scope="module")
def unlabelled(demo_store, tmp_path_factory):
    """The demo store without the bottleneck labels: B comes from the trains."""
    path = tmp_path_factory.mktemp("bn") / "nolabel.duckdb"
    shutil.copy(demo_store, path)
    with tracekit.open(str(path)) as s:
        _strip_rate_labels(s.con)
        s.analyze()
        yield s.con


def test_lab_runs_read_as_the_emulators_rate(unlabelled):
    rows = unlabelled.execute("""
        SELECT c.labels['run'], b.flow_id, b.rate_bps, b.known, b.confidence FROM bottleneck b
        JOIN captures c USING (capture_id)
        WHERE b.direction = 's2c' AND (c.labels['experiment'] = 'counterfactual'
              OR c.labels['experiment'] = 'cross-region' AND c.labels['path'] = 'direct')""").fetchall()
    assert len(rows) >= 50
    known = [r for r in rows if r[3]]
    assert len(known) >= 0.9 * len(rows), rows
    for run, flow, rate, _, confidence in known:  # the emulator's 50 Mbit/s (IP bytes)
        assert rate == pytest.approx(50e6, rel=0.05), (run, flow, rate, confidence)


def test_the_bound_never_exceeds_the_measured_time(demo_store, unlabelled):
    with tracekit.open(str(demo_store), read_only=True) as s:
        for con in (s.con, unlabelled):
            rows = con.execute("SELECT request_key, bound_ns, duration_ns, rate_source FROM bounds").fetchall()
            assert len(rows) >= 120
            assert [r for r in rows if r[1] > r[2]] == []
    # every direct lab request but a few has a measured B (through the tunnel the capture sees
    # only the local leg: no bottleneck, B unknown)
    direct = dict(unlabelled.execute("""
        SELECT coalesce(b.rate_source, 'unknown'), count(*) FROM bounds b JOIN requests r USING (request_key)
        WHERE r.labels['experiment'] = 'counterfactual'
           OR r.labels['experiment'] = 'cross-region' AND r.labels['path'] = 'direct'
        GROUP BY ALL""").fetchall())
    assert sum(direct.values()) == 76
    assert direct.get("trains", 0) + direct.get("capture_trains", 0) >= 72, direct


def test_a_runs_rate_does_not_depend_on_what_shares_the_store(unlabelled, tmp_path):
    with tracekit.open(str(tmp_path / "one.duckdb")) as s:
        from tracekit.pipeline.ingest import ingest_runs
        from tracekit.pipeline.manifests import read_manifest
        runs = [r for r in read_manifest(LAB / "counterfactual.runs.json")
                if "counterfactual-002" in str(r)]
        ingest_runs(s.con, runs)
        s.analyze()
        alone = s.con.execute("SELECT flow_id, direction, rate_bps, known FROM bottleneck "
                              "ORDER BY ALL").fetchall()
    shared = unlabelled.execute("""
        SELECT flow_id, direction, rate_bps, known FROM bottleneck JOIN captures c USING (capture_id)
        WHERE c.labels['run'] = 'counterfactual-002' ORDER BY ALL""").fetchall()
    assert alone and alone == shared


# -- a path made by hand: tbf at a known rate ------------------------------------------------

NS = ("tkmeas-c", "tkmeas-s")
ADDR = ("198.18.77.1", "198.18.77.2")


def _sh(*cmd):
    subprocess.run(cmd, check=True, capture_output=True)


@pytest.fixture
def tbf_path(tmp_path):
    if os.geteuid() != 0 or not shutil.which("tcpdump") or not shutil.which("curl"):
        pytest.skip("needs root, tcpdump and curl")
    for ns in NS:
        subprocess.run(["ip", "netns", "del", ns], capture_output=True)
        _sh("ip", "netns", "add", ns)
        _sh(*in_ns(ns, "ip", "link", "set", "lo", "up"))
    try:
        _sh("ip", "link", "add", "tkmeas0", "netns", NS[0], "type", "veth", "peer", "tkmeas1",
            "netns", NS[1])
        for ns, dev, addr in zip(NS, ("tkmeas0", "tkmeas1"), ADDR):
            _sh(*in_ns(ns, "ip", "addr", "add", f"{addr}/30", "dev", dev))
            _sh(*in_ns(ns, "ip", "link", "set", dev, "up"))
        (tmp_path / "www").mkdir()
        (tmp_path / "www" / "blob").write_bytes(os.urandom(3_000_000))
        server = subprocess.Popen(in_ns(NS[1], sys.executable, "-m", "http.server", "8080", "--bind",
                                        ADDR[1], "--directory", str(tmp_path / "www")),
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            for _ in range(100):  # wait for the server to listen
                if subprocess.run(in_ns(NS[0], "curl", "-s", "-o", "/dev/null", f"http://{ADDR[1]}:8080/"),
                                  capture_output=True).returncode == 0:
                    break
                time.sleep(0.1)
            yield tmp_path
        finally:
            stop(server)
    finally:
        for ns in NS:
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)


@pytest.mark.parametrize("mbit", [10, 50])
def test_a_token_bucket_reads_as_its_rate_from_either_end(tbf_path, mbit):
    _sh(*in_ns(NS[1], "tc", "qdisc", "replace", "dev", "tkmeas1", "root", "tbf", "rate", f"{mbit}mbit",
               "burst", "32kbit" if mbit == 10 else "64kbit", "latency", "100ms"))
    caps = [str(tbf_path / f"{side}.pcap") for side in ("client", "server")]
    size = 3_000_000 if mbit == 50 else 1_000_000
    (tbf_path / "www" / "blob").write_bytes(os.urandom(size))
    with tcpdump(lambda c: in_ns(NS[0], *c), caps[0], device="tkmeas0"), \
            tcpdump(lambda c: in_ns(NS[1], *c), caps[1], device="tkmeas1"):
        _sh(*in_ns(NS[0], "curl", "-s", "-o", "/dev/null", f"http://{ADDR[1]}:8080/blob"))
    with tracekit.open(str(tbf_path / f"tbf{mbit}.duckdb")) as s:
        s.ingest(caps)
        s.analyze()
        rows = s.con.execute("""
            SELECT c.file_name, b.side, b.rate_bps, b.known, b.confidence FROM bottleneck b
            JOIN captures c USING (capture_id) JOIN flows f USING (capture_id, flow_id)
            WHERE b.direction = 's2c' AND f.payload_bytes_s2c > 500000""").fetchall()
        fetch = s.con.execute("""
            SELECT c.file_name, b.bound_ns, b.duration_ns, b.rate_source,
                (SELECT sum(ns) FROM attribution a WHERE a.request_key = b.request_key
                 AND NOT a.irreducible) FROM bounds b JOIN requests r USING (request_key)
            JOIN captures c USING (capture_id) WHERE r.bytes_down >= ?""", [size]).fetchall()
    # tbf counts the Ethernet header: 1514-byte frames carry 1500 IP bytes
    ip_rate = mbit * 1e6 * 1500 / 1514
    assert sorted(r[0] for r in rows) == ["client.pcap", "server.pcap"], rows
    for name, side, rate, known, confidence in rows:
        print(f"tbf {mbit} Mbit/s: {name} ({side}) {rate / 1e6:.2f} Mbit/s, confidence {confidence}")
        assert known, rows
        assert rate == pytest.approx(ip_rate, rel=0.03), rows
    # the fetch ran near the bucket's rate: its bound (from the measured B) is most of
    # its time, never above it, and the spans beyond the bound are the gap
    assert sorted(f[0] for f in fetch) == ["client.pcap", "server.pcap"], fetch
    for name, bound, duration, source, beyond in fetch:
        print(f"tbf {mbit} Mbit/s: {name} bound {bound / 1e6:.1f} ms of {duration / 1e6:.1f} ms ({source})")
        assert source == "trains" and 0.8 * duration <= bound <= duration, fetch
        assert beyond == duration - bound, fetch
