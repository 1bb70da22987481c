"""A token bucket as the bottleneck (issue #26): Linux's tbf lets its burst
through at line rate after an idle, then spaces packets at its rate. A
sender that starts a warm response with its whole window (CUBIC on a
persistent connection) gets that burst's packets past a queue that would
have dropped them; the replay without the bucket cut the window where the
kernel did not and was 5-27 % slow on the capture below.

tests/data/tbf-bucket/c-A-rtt100-persistent-0.pcap: made 2026-12-07 (set
15, /work/scratch/set15/make15.py, not the lab): client -- a user-space
delay line (RTT 100 ms, 1 Gbit/s) -- a router whose egress towards the
client is `tbf rate 12mbit burst 6000 limit 60000` -- server (python's
http.server, CUBIC). curl fetches 400,204 bytes six times on one
connection; tcpdump at the client, 128-byte snaplen. curl's time_total:
0.814, 0.604, 0.640, 0.740, 0.726, 0.712 s; tc counted 97 drops.
"""

import dataclasses
from pathlib import Path as FilePath

import numpy as np
import pytest
from click.testing import CliRunner

import tracekit
from tracekit.cli.app import main
from tracekit.whatif import replayer
from tracekit.whatif.calibrate import calibrate
from tracekit.whatif.engine import calibrated
from tracekit.whatif.tcp import Conn, Path, Transfer

DATA = FilePath(__file__).parent / "data"
TBF = DATA / "tbf-bucket" / "c-A-rtt100-persistent-0.pcap"
FIFO = DATA / "whatif" / "delay-line" / "c-ren9-rtt40-persistent-0.pcap"
BURST, WIRE = 6000, 1500  # the tbf's burst (bytes); a full-sized packet on the wire


def _store(tmp_path_factory, capture):
    db = tmp_path_factory.mktemp("bucket") / "s.duckdb"
    for args in (["ingest", str(capture)], ["analyze"]):
        r = CliRunner().invoke(main, [*args, "--db", str(db)])
        assert r.exit_code == 0, r.output
    return db


@pytest.fixture(scope="module")
def tbf(tmp_path_factory):
    with tracekit.open(str(_store(tmp_path_factory, TBF)), read_only=True) as s:
        yield s.con


def _arrivals(bucket, n, queue=60_700.0, rate=1.5e6):  # (a queue not a whole number of packets)
    """Arrival times (s) of a burst of n full-sized segments sent at once into an idle path."""
    tr = Transfer(Conn(), Path(rtt=0.0, rate=rate, queue_bytes=queue, bucket=bucket), n, 1448,
                  np.random.default_rng(0))
    for s in range(n):
        tr._emit(s)
    return np.array(sorted(t for t, _, kind, _ in tr.events if kind == "data"))


def test_a_bucket_passes_its_burst_at_once_then_spaces_at_the_rate():
    fifo, tbf = _arrivals(0.0, 60), _arrivals(BURST, 60)
    step = WIRE / 1.5e6
    assert len(fifo) == 60_700 // WIRE  # a FIFO holds its queue's bytes
    assert len(tbf) == (60_700 + BURST) // WIRE  # and a bucket its burst more
    assert np.allclose(fifo, step * np.arange(1, len(fifo) + 1))
    k = BURST // WIRE + 1  # 5 leave at once, the 6th waits for one packet's tokens
    assert np.allclose(tbf[:k], step)
    assert np.allclose(np.diff(tbf[k - 1:]), step)


def test_the_calibration_reads_the_buckets_burst_from_the_client_capture(tbf):
    cal = calibrate(tbf, {}, None)
    assert abs(cal.bucket_bytes - BURST) <= WIRE
    assert cal.rate_Bps * 8 / 1e6 == pytest.approx(12, rel=0.01)  # (a TUN's tbf: IP bytes)


def test_a_fifos_capture_reads_no_bucket(tmp_path_factory):
    with tracekit.open(str(_store(tmp_path_factory, FIFO)), read_only=True) as s:
        cal = calibrate(s.con, {}, None)
    assert cal.bucket_bytes == 0 and "none: a FIFO" in cal.sources["bucket_bytes"]


def test_warm_responses_replayed_through_the_bucket_take_the_kernels_times(tbf):
    cal, measured, replayed = calibrated(tbf, {}, draws=40)
    med = np.median(replayed, axis=1)
    err = np.abs(med - measured) / measured
    assert err.max() < 0.03, (measured, med)
    # the bucket is what does it: the same replay through a FIFO misses by far more
    without = replayer.replay(dataclasses.replace(cal, bucket_bytes=0.0),
                              replayer.setting(dataclasses.replace(cal, bucket_bytes=0.0), {}),
                              draws=40)
    assert (np.abs(np.median(without, axis=1) - measured) / measured).max() > 0.10



def test_a_bucket_larger_than_a_first_flight_is_read_from_the_flights_after(tmp_path_factory):
    """tests/data/tbf-bucket/c-F-rtt25-fresh-0-first3.pcap (set 16, made by a
    helper with set 15's scripts: RTT 25 ms, `tbf rate 30mbit burst 30000
    limit 120000`, CUBIC, 800,204 bytes fetched on a fresh connection each;
    the capture's first three connections, `editcap -r ... 1-3077`): a first
    flight is 10 segments, 13,500 bytes after its first, all of them back to
    back -- the bucket is at least that; the second flight, sent as fast as
    the first's ACKs came, shows where it ends."""
    with tracekit.open(str(_store(tmp_path_factory, TBF.with_name(
            "c-F-rtt25-fresh-0-first3.pcap"))), read_only=True) as s:
        cal = calibrate(s.con, {}, None)
    assert abs(cal.bucket_bytes - 30_000) <= WIRE, cal.sources["bucket_bytes"]



def test_the_bucket_is_a_factor_the_lab_emulates(tbf):
    """bucket_bytes: read from the trace, stated with --assume or --set, and
    carried into `--emulate`'s lab experiment (its path a token bucket too:
    lab/wan.py, tests/test_wan_link.py)."""
    from types import SimpleNamespace

    from tracekit.whatif import factors
    from tracekit.whatif.emulate import spec
    cal = calibrate(tbf, {}, None)
    arms = spec(SimpleNamespace(calibration=cal, target={"bucket_bytes": 0.0}))["levels"]["arm"]
    assert arms["source"]["bucket_bytes"] == 6000 and "bucket_bytes" not in arms["target"]
    assert factors.parse("bucket_bytes=15000") == {"bucket_bytes": 15000.0}
    assert replayer.setting(cal, {"bucket_bytes": 30000.0}).bucket == 30000.0
