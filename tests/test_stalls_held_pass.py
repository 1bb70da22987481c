"""steps/stalls_held.py's array pass against the staged SQL it replaced
(tests/stalls_held_oracle.py): the same held frames on crafted flows -- a
receiver advertising its window, a sender filling it one turnaround later,
with the corners the SQL decides by itself: several packets at one instant,
time going backwards, equal edges reached twice, ACKs without an edge, the
receiver's own data, retransmissions, a missing MSS option, flows without a
round trip. And on a hand-made flow whose held segments are known."""

import duckdb
import numpy as np
import pytest

from stalls_held_oracle import held_frames_sql
from tracekit.pipeline.steps import stalls_held
from tracekit.pipeline.steps.stalls_held import held_frames

SCHEMA = """
CREATE TABLE rtt_summary (capture_id INT, flow_id INT, direction VARCHAR, vantage VARCHAR,
                          min_rtt_ns BIGINT, handshake_rtt_ns BIGINT);
CREATE TABLE flows (capture_id INT, flow_id INT, client_mss INT, server_mss INT,
                    packets_c2s BIGINT, packets_s2c BIGINT, syn_count INT, synack_count INT);
CREATE SCHEMA store;  -- tcp_analysis's dense columns, which the pass reads; the oracle, the view
CREATE TABLE store.tcp_analysis (capture_id INT, frame BIGINT, ts_ns BIGINT, flow_id INT,
                                 from_client BOOLEAN, segment VARCHAR, payload_bytes INT,
                                 rel_end BIGINT, rel_ack BIGINT);
CREATE VIEW tcp_analysis AS SELECT * FROM store.tcp_analysis;
CREATE TABLE packets (capture_id INT, frame BIGINT, flow_id INT, tcp_flags INT,
                      tcp_window_bytes INT);
"""
ACK, SYN = 16, 2
MS = 1_000_000


class Store:
    def __init__(self):
        self.con = duckdb.connect()
        self.con.execute(SCHEMA)
        self.frame = 0
        self.rows = {"rtt_summary": [], "flows": [], "tcp_analysis": [], "packets": []}

    def done(self):
        """The tables written (one INSERT each); the connection."""
        def sql(v):
            return "NULL" if v is None else repr(v) if isinstance(v, str) else str(v)
        for table, rows in self.rows.items():
            if rows:
                self.con.execute(f"INSERT INTO {'store.' * (table == 'tcp_analysis')}{table} VALUES " + ", ".join(
                    "(" + ", ".join(map(sql, row)) + ")" for row in rows))
        return self.con

    def flow(self, fid, client_data, lag_ns, mss_option):
        """A flow whose data goes client -> server (client_data) or back, captured
        at its receiver, the sender's leg `lag_ns` (None: no round trip)."""
        self.rows["rtt_summary"].append([1, fid, "s2c" if client_data else "c2s",
                          "server" if client_data else "client", lag_ns, lag_ns])
        self.rows["flows"].append([1, fid, None if client_data else mss_option,
                                   mss_option if client_data else None, 30, 30, 1, 1])

    def packet(self, fid, from_client, ts, segment=None, payload=0, rel_end=None, rel_ack=None,
               window=None, flags=ACK):
        self.frame += 1
        self.rows["tcp_analysis"].append([1, self.frame, ts, fid, from_client, segment, payload,
                                          rel_end, rel_ack])
        self.rows["packets"].append([1, self.frame, fid, flags, window])
        return self.frame


def random_flow(store, rng, fid):
    client_data = bool(rng.integers(2))
    lag = int(rng.choice([0, 1, 2, 5])) * MS if rng.random() > 0.05 else None
    store.flow(fid, client_data, lag, int(rng.choice([100, 120])) if rng.random() > 0.3 else None)
    ts, end, ack, edges = 0, 1, 1, []  # edges: (time, edge) the receiver sent
    for _ in range(int(rng.integers(5, 60))):
        ts += int(rng.choice([0, 0, MS // 10, MS, 3 * MS, -MS // 2]))
        r = rng.random()
        if r < 0.4:  # the receiver ACKs what came, with a window (or none)
            ack = max(ack, end - int(rng.choice([0, 0, 100])))
            window = int(rng.choice([0, 100, 150, 200, 300, 1000])) if rng.random() > 0.05 else None
            edges.append((ts, ack + (window or 0)))
            store.packet(fid, not client_data, ts, rel_ack=ack, window=window,
                         flags=ACK | (SYN if rng.random() < 0.03 else 0))
        elif r < 0.85:  # new data, mostly within the edge seen a turnaround back
            seen = max((e for t, e in edges if t <= ts - (lag or 0)), default=end + 100)
            payload = int(rng.choice([100, 100, 40]))
            if end + payload <= seen or rng.random() < 0.2:
                store.packet(fid, client_data, ts, "new", payload, end + payload, 1, 65535)
                end += payload
        elif r < 0.93:  # a retransmission
            store.packet(fid, client_data, ts, "retransmission", 100, end, 1, 65535)
        else:  # the receiver's own data (a new request)
            store.packet(fid, not client_data, ts, "new", 50, None, ack, 1000)


@pytest.mark.parametrize("group_packets,jit", [(None, "never"), (100, "never"), (None, "always")])
def test_the_pass_holds_the_frames_the_staged_sql_held(monkeypatch, group_packets, jit):
    """Also with the flows read in groups of about two flows (the memory bound),
    and with the pass compiled. Most flows go through the compiled pass
    (held_segments), those whose receiver's time goes back through held_of:
    both are asked."""
    monkeypatch.setenv("TRACEKIT_JIT", jit)
    if group_packets:
        monkeypatch.setattr(stalls_held, "GROUP_PACKETS", group_packets)
    sorted_flows, all_flows = [], []
    real_held_of, real_by_flow = stalls_held.held_of, stalls_held.held_by_flow
    monkeypatch.setattr(stalls_held, "held_of", lambda legs, p: sorted_flows.append(
        len(np.unique(p["flow_id"]))) or real_held_of(legs, p))
    monkeypatch.setattr(stalls_held, "held_by_flow", lambda legs, p: all_flows.append(
        len(np.unique(p["flow_id"]))) or real_by_flow(legs, p))
    held = 0
    for seed in range(6):
        rng = np.random.default_rng(seed)
        store = Store()
        for fid in range(40):
            random_flow(store, rng, fid)
        con = store.done()
        want = held_frames_sql(con, 1)
        got = held_frames(con, 1)
        assert np.array_equal(got, want), (seed, got, want)
        held += len(want)
    assert held >= 20, held  # the crafted flows do hold segments
    # the flows with a round trip go through the compiled pass, those whose time
    # goes back through held_of (about half each way)
    assert 0 < sum(sorted_flows) < sum(all_flows), (sorted_flows, all_flows)


def test_a_sender_filling_the_window_a_turnaround_late():
    """Receiver at the client, the sender's leg 2 ms, MSS 100. The client opens
    its edge 100 bytes at a time; the server's segment fills each edge 2 ms
    after the ACK that opened it (held: the edge it saw left no room for one
    more segment, and its next segment came as soon as the next ACK reached
    it), then the last one before a request of the client's (not held)."""
    s = Store()
    s.flow(0, False, 2 * MS, 100)
    held = []
    for i in range(4):
        s.packet(0, True, 10 * i * MS, rel_ack=1, window=100 * (i + 1))
        frame = s.packet(0, False, (10 * i + 2) * MS, "new", 100, 1 + 100 * (i + 1), 1, 65535)
        if i < 3:  # the next one follows the next ACK by a turnaround
            held.append(frame)
    s.packet(0, True, 35 * MS, "new", 50, None, 401, 1000)  # the client's next request
    s.packet(0, True, 36 * MS, rel_ack=401, window=400)
    s.packet(0, False, 38 * MS, "new", 100, 501, 1, 65535)
    con = s.done()
    got = held_frames(con, 1)
    assert list(got) == held
    assert np.array_equal(held_frames_sql(con, 1), got)


def test_the_search_by_group_when_one_key_would_overflow():
    """_search's loop over groups (values too far apart for one (group, value)
    key) finds what numpy finds in each group's slice."""
    from tracekit.pipeline.steps.stalls_held import _at_least, _at_most
    rng = np.random.default_rng(1)
    for big in (1000, 1 << 61):
        t_g = np.sort(rng.integers(0, 5, 200))
        t_v = np.concatenate([np.sort(rng.integers(0, big, (t_g == g).sum())) for g in range(5)])
        q_g = np.sort(rng.integers(0, 6, 300))
        q_v = rng.integers(-10, big, 300)
        i, ok = _at_least(t_g, t_v, q_g, q_v)
        j, ok2 = _at_most(t_g, t_v, q_g, q_v)
        for k in range(300):
            vals = t_v[t_g == q_g[k]]
            up, down = vals[vals >= q_v[k]], vals[vals <= q_v[k]]
            assert ok[k] == bool(len(up)) and ok2[k] == bool(len(down))
            if len(up):
                assert t_g[i[k]] == q_g[k] and t_v[i[k]] == up.min()
            if len(down):
                assert t_g[j[k]] == q_g[k] and t_v[j[k]] == down.max()
