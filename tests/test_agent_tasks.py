"""Tasks and agent rounds from tracekit's event vocabulary (docs/agents.md),
on a client log and a server log whose every span is set by hand.

Task t1 (deadline 2 s): setup 50 ms, then rounds of edge 100 ms (a screenshot),
upload 200 ms (client start .. server has it), model 300 ms, network 40 ms
(model end .. response at the client), 5 ms nothing logged, action 20 ms, and
5 ms to round_end: 670 ms a round. Round 2 is cut by a disconnect after its
action (commit of round 1 only); 250 ms to reconnect; round 2 is done again,
and the retry re-executes its action (the same action id twice).
"""

import json

import pytest

from tracekit.pipeline.analyze import analyze
from tracekit.pipeline.logs import load_logs
from tracekit.readers.events import read_log

BASE = 1_800_000_000_000_000_000
MS = 1_000_000


def round_events(t, n, action="click"):
    """Client and server events of one round starting at t ms; returns (client, server, end)."""
    aid = f"t1-{n}"
    client = [(t, "round_start", {}), (t, "edge_start", {}), (t + 100, "edge_end", {}),
              (t + 100, "upload_start", {}), (t + 100, "request_start", {"request": f"r{n}-{t}"}),
              (t + 640, "request_end", {"request": f"r{n}-{t}"}),
              (t + 645, "action_start", {"action_id": aid, "action": action}),
              (t + 665, "action_end", {"action_id": aid}), (t + 670, "round_end", {})]
    server = [(t + 300, "upload_end", {}), (t + 300, "model_start", {}), (t + 600, "model_end", {})]
    return client, server, t + 670


def write_log(path, rows, run="lab-1"):
    lines = [json.dumps({"ts_ns": BASE + round(ts * MS), "kind": kind, "run": run, "task": task,
                         **({"round": rnd} if rnd is not None else {}), **extra})
             for ts, kind, task, rnd, extra in sorted(rows, key=lambda r: r[0])]
    path.write_text("\n".join(lines) + "\n")


@pytest.fixture
def store(db, tmp_path):
    client, server = [], []
    client.append((0, "task_start", "t1", None, {"deadline_s": 2.0}))
    t = 50
    for n in (1, 2):
        c, s, t = round_events(t, n)
        client += [(ts, k, "t1", n, x) for ts, k, x in c]
        server += [(ts, k, "t1", n, x) for ts, k, x in s]
        if n == 1:
            server.append((t + 101, "commit", "t1", 1, {}))  # carried by round 2's upload
    client = [r for r in client if not (r[1] == "round_end" and r[3] == 2)]  # cut before its end
    t -= 5  # the disconnect comes right after the action
    client += [(t, "disconnect", "t1", 2, {}), (t + 250, "reconnect", "t1", 2, {}),
               (t + 250, "retry", "t1", 2, {"action_id": "t1-2"})]
    c, s, t = round_events(t + 250, 2)
    client += [(ts, k, "t1", 2, x) for ts, k, x in c]
    server += [(ts, k, "t1", 2, x) for ts, k, x in s]
    client.append((t + 30, "task_end", "t1", None, {}))
    write_log(tmp_path / "client.jsonl", client)
    write_log(tmp_path / "server.jsonl", server)
    load_logs(db, [read_log(str(tmp_path / "client.jsonl")), read_log(str(tmp_path / "server.jsonl"))])
    analyze(db)
    return db


def rows(con, sql):
    cur = con.execute(sql)
    names = [d[0] for d in cur.description]
    return [dict(zip(names, r)) for r in cur.fetchall()]


def test_round_spans_add_up_to_the_round(store):
    rounds = rows(store, "SELECT * FROM agent_rounds ORDER BY start_ns")
    assert [(r["round"], r["attempt"], r["status"], r["superseded"]) for r in rounds] == [
        (1, 1, "done", False), (2, 1, "interrupted", True), (2, 2, "done", False)]
    first = rounds[0]
    assert first["round_ns"] == 670 * MS
    assert [first[k] // MS for k in ("edge_ns", "upload_ns", "model_ns", "network_ns",
                                     "action_ns", "unexplained_ns")] == [100, 200, 300, 40, 20, 10]
    for r in rounds:
        assert r["round_ns"] == sum(r[k] for k in ("edge_ns", "upload_ns", "model_ns",
                                                   "network_ns", "action_ns", "unexplained_ns"))
        assert r["action_id"] == f"t1-{r['round']}" and r["requests"] == 1
    # the cut round ends at the disconnect, 665 ms after its start: no 5 ms tail
    assert rounds[1]["round_ns"] == 665 * MS and rounds[1]["unexplained_ns"] == 5 * MS


def test_task_totals_deadline_and_recovery(store):
    (task,) = rows(store, "SELECT * FROM tasks")
    assert task["setup_ns"] == 50 * MS and task["rounds"] == 2 and task["executions"] == 3
    assert task["lost_rounds"] == 1 and task["reconnect_ns"] == 250 * MS
    assert task["redo_ns"] == (250 + 665) * MS  # reconnect + the lost execution
    assert task["rounds_ns"] == (670 + 665 + 670) * MS
    assert task["duration_ns"] == (50 + 670 + 665 + 250 + 670 + 30) * MS
    assert task["between_ns"] == 30 * MS  # round_end .. task_end: nothing logged
    assert task["deadline_ns"] == 2000 * MS and task["slack_ns"] == (2000 - 2335) * MS
    assert task["met"] is False and task["committed_round"] == 1
    assert task["duplicate_actions"] == 1 and task["retries"] == 1
    assert task["reexecuted_retries"] == 1


def test_a_store_of_logs_alone_builds_every_analysis(store):
    # agent_rounds reads the attribution, which must build without a capture
    assert store.execute("SELECT analysis, error FROM analysis_runs "
                         "WHERE error IS NOT NULL").fetchall() == []
    d = store.execute("""SELECT list_sum(map_values(r.request_spans)), q.duration_ns
                         FROM agent_rounds r JOIN requests q USING (request_key)""").fetchall()
    assert len(d) == 3 and all(spans == ns for spans, ns in d)


def test_the_commands(store, tmp_path):
    from click.testing import CliRunner

    from tracekit.cli import main
    db = store.execute("SELECT path FROM duckdb_databases() WHERE NOT internal").fetchone()[0]
    store.close()
    r = CliRunner().invoke(main, ["tasks", "--db", db, "--format", "csv"])
    assert r.exit_code == 0 and "lab-1,t1,2,3,1,2.335" in r.output
    r = CliRunner().invoke(main, ["agent-rounds", "--db", db, "--format", "csv"])
    assert r.exit_code == 0 and len(r.output.splitlines()) == 4
    # two done rounds of 670 ms (round 2's first execution was superseded) and 50 ms of setup
    r = CliRunner().invoke(main, ["deadline", "--db", db, "--rounds", "3", "--deadline", "2.06",
                                  "--disconnect", "2", "0.25", "--format", "csv"])
    assert r.exit_code == 0, r.output
    assert r.output.splitlines()[1].startswith("3,2.06,2,0.67,0.05,1.0,1.0,0,")
    # 2.06 s + 0.25 s + one round (0.67) or two rounds (1.34) lost
    assert r.output.splitlines()[1].endswith(",2.98,3.65")
    r = CliRunner().invoke(main, ["placement", "--db", db, "--rounds", "2", "--deadline", "2",
                                  "--tier", "slow:model_s=1.3,power_w=10", "--format", "csv"])
    assert r.exit_code == 0, r.output
    # the model's 300 ms become 1.3 s: rounds of 1.67 s, 0.05 + 2 x 1.67 = 3.39 s, 33.9 J
    assert r.output.splitlines()[2] == "slow,1.67,3.39,0.0,False,33.9"
    r = CliRunner().invoke(main, ["placement", "--chapter", "--format", "csv"])
    assert r.output.splitlines()[1:] == ["local device,2.9,0.0,,64.0,False,",
                                         "nearby workstation,0.137,0.02,80.0,11.0,True,3.6",
                                         "cloud,0.073,0.2,6.4,31.6,True,3.83"]
    r = CliRunner().invoke(main, ["placement", "--db", db, "--tier", "x:warp=9"])
    assert r.exit_code == 2 and "unknown key 'warp'" in r.output


def test_a_start_that_never_ended_is_no_span(db, tmp_path):
    # round 1 is cut during its upload (no upload_end), then done again: the
    # first upload_start must not pair with the second execution's upload_end
    events = [(0, "task_start", "t", None, {}), (0, "round_start", "t", 1, {}),
            (10, "upload_start", "t", 1, {}), (60, "disconnect", "t", 1, {}),
            (100, "reconnect", "t", 1, {}), (100, "round_start", "t", 1, {}),
            (110, "upload_start", "t", 1, {}), (150, "upload_end", "t", 1, {}),
            (160, "round_end", "t", 1, {}), (160, "task_end", "t", None, {})]
    write_log(tmp_path / "cut.jsonl", events)
    load_logs(db, [read_log(str(tmp_path / "cut.jsonl"))])
    analyze(db)
    got = rows(db, "SELECT attempt, status, round_ns, upload_ns, unexplained_ns "
                   "FROM agent_rounds ORDER BY start_ns")
    assert [(r["attempt"], r["status"], r["round_ns"] // MS, r["upload_ns"] // MS,
             r["unexplained_ns"] // MS) for r in got] == [(1, "interrupted", 60, 0, 60),
                                                          (2, "done", 60, 40, 20)]

