"""Evidence for agent tasks (issue #28) from real runs of the lab's agent loop
(tracekit/lab/agent.py: HTTP/1.1 over kernel TCP between two namespaces, the
client's uplink a tbf qdisc), each checked against something independent:

  spans     each round's spans add up to the round the client timed itself
            (perf_counter, `client_round_ns` of its round_end) within 1 ms
  tiers     task times against agent_task_time within 5 %: two tiers (model
            time and uplink) and an alternating rate schedule (6/10 Mbit/s
            scaled); the upload is the request's bytes as captured, with
            TCP/IP/Ethernet headers per segment, less the one frame tbf's
            bucket lets through at once
  redo      the extra time of an injected disconnect (committed: one round
            lost; uncommitted: all) against redo_after_disconnect within 5 %
  deadline  P(T <= D) predicted from the rounds of a calibration run (a
            Markov rate schedule with slow periods spanning rounds),
            resampled in blocks and independently, against the share of
            >= 200 tasks of an evaluation run with the same schedule process

    sudo python tools/agent_evidence.py [--out out/agent] [--quick]

Run data stays in --out (gitignored); prints one JSON document of results.
"""

import argparse
import json
import os
import random
import statistics
import sys

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, HERE)

from tracekit import api, model  # noqa: E402
from tracekit.lab.agentpath import BURST, AgentPath  # noqa: E402

MSS, HEADERS = 1448, 66  # payload per segment on a 1500-byte MTU with timestamps; TCP+IP+Eth


def run_case(path, workdir, capture=True, **cfg):
    """One run of the loop on `path`, ingested and analysed; returns the store's path."""
    files = path.run(workdir, capture=capture, **cfg)
    db = os.path.join(workdir, "runs.duckdb")
    if os.path.exists(db):
        os.remove(db)
    api.ingest(db, [f for k, f in files.items() if k in ("client", "server", "capture")])
    api.analyze(db)
    return db


def frame(db, sql):
    with api.open(db, read_only=True) as store:
        return store.sql(sql).fetchdf()


def span_check(db):
    """Largest |sum of the spans - the client's own round time| in ns, over done rounds."""
    d = frame(db, """
        SELECT r.edge_ns + r.upload_ns + r.model_ns + r.network_ns + r.action_ns
               + r.unexplained_ns AS spans, TRY_CAST(e.fields->>'client_round_ns' AS BIGINT) AS own
        FROM agent_rounds r JOIN events e ON e.kind = 'round_end'
            AND e.fields->>'task' = r.task AND TRY_CAST(e.fields->>'round' AS INT) = r.round
            AND e.ts_ns = r.end_ns
        WHERE r.status = 'done'""")
    return int((d["spans"] - d["own"]).abs().max()), len(d)


def upload_bits(db):
    """A round's upload on the wire, as tbf meters it, from the captured request bytes."""
    up = frame(db, "SELECT median(bytes_up) AS b FROM requests WHERE source = 'events'")["b"][0]
    return (model.wire_bytes(int(up), MSS, HEADERS) - BURST) * 8, int(up)


def closed_task(db, cfg, rates):
    """agent_task_time for the run's configuration, its upload as captured."""
    bits, _ = upload_bits(db)
    setup = frame(db, "SELECT median(setup_ns) / 1e9 AS s FROM tasks")["s"][0]
    return model.agent_task_time(cfg["rounds"], cfg["edge_s"] + cfg["action_s"], cfg["model_s"],
                                 setup, bits, rates, setup_s=setup)


def task_times(db):
    return frame(db, "SELECT duration_ns / 1e9 AS s FROM tasks ORDER BY start_ns")["s"].tolist()


def tiers(out, quick):
    base = dict(rounds=4 if quick else 10, upload_bytes=40_000, edge_s=0.01, action_s=0.002,
                tasks=2 if quick else 5, deadline_s=5.0)
    results = {}
    for name, model_s, rate, schedule in (
            ("cloud-like", 0.03, 4e6, None), ("nearby-like", 0.08, 40e6, None),
            ("alternating", 0.03, 6e6, [6e6, 10e6])):
        cfg = dict(base, model_s=model_s)
        rates = rate
        if schedule:
            per_task = [schedule[0]] * (cfg["rounds"] // 2) + [schedule[1]] * (cfg["rounds"] // 2)
            cfg["rates"] = per_task * cfg["tasks"]
            rates = per_task
        with AgentPath(rate) as path:
            db = run_case(path, os.path.join(out, name), **cfg)
        measured = statistics.median(task_times(db))
        predicted = closed_task(db, cfg, rates)
        worst, n = span_check(db)
        results[name] = {"task_s": round(measured, 4), "closed_form_s": round(predicted, 4),
                         "error": round(measured / predicted - 1, 4), "rounds": n,
                         "span_vs_client_max_ns": worst, "upload_bytes_captured": upload_bits(db)[1]}
        if schedule:
            steady = closed_task(db, cfg, sum(schedule) / 2)
            results[name]["closed_form_at_mean_rate_s"] = round(steady, 4)
    return results


def redo(out, quick):
    rounds, k, reconnect = (4, 3, 0.1) if quick else (8, 6, 0.2)
    base = dict(rounds=rounds, upload_bytes=40_000, edge_s=0.01, action_s=0.002, model_s=0.03,
                tasks=2 if quick else 4, reconnect_s=reconnect)
    results = {}
    with AgentPath(4e6) as path:
        clean_db = run_case(path, os.path.join(out, "clean"), **base)
        clean = statistics.median(task_times(clean_db))
        bits, _ = upload_bits(clean_db)
        round_s = base["edge_s"] + base["action_s"] + base["model_s"] + bits / 4e6
        for mode, committing, lost in (("committed", True, 1), ("uncommitted", False, k)):
            db = run_case(path, os.path.join(out, mode), committing=committing,
                          disconnect_after=k, **base)
            extra = statistics.median(task_times(db)) - clean
            predicted = model.redo_after_disconnect(round_s, lost, reconnect)
            t = frame(db, "SELECT median(lost_rounds) AS l, median(redo_ns) / 1e9 AS r, "
                          "sum(duplicate_actions) AS d FROM tasks")
            results[mode] = {"extra_s": round(extra, 4), "closed_form_s": round(predicted, 4),
                             "error": round(extra / predicted - 1, 4),
                             "lost_rounds": int(t["l"][0]), "redo_s_table": round(t["r"][0], 4),
                             "duplicate_actions": int(t["d"][0])}
    return results


def markov_rates(n, seed, fast=8e6, slow=1e6, stay_fast=0.93, stay_slow=0.8):
    rng, slow_now, out = random.Random(seed), False, []
    for _ in range(n):
        slow_now = (rng.random() < stay_slow) if slow_now else (rng.random() >= stay_fast)
        out.append(slow if slow_now else fast)
    return out


def deadline(out, quick):
    rounds, tasks = (3, 30) if quick else (5, 240)
    base = dict(rounds=rounds, upload_bytes=12_500, edge_s=0.005, action_s=0.001,
                model_s=0.005)
    with AgentPath(8e6) as path:
        calib = run_case(path, os.path.join(out, "calibration"), capture=False, tasks=tasks // 2,
                         rates=markov_rates(rounds * tasks // 2, 1), **base)
        evaluation = run_case(path, os.path.join(out, "evaluation"), capture=False, tasks=tasks,
                              rates=markov_rates(rounds * tasks, 2), **base)
    times = task_times(evaluation)
    d = statistics.quantiles(times, n=10)[7]  # the 80th percentile of the evaluation
    share = sum(t <= d for t in times) / len(times)
    with api.open(calib, read_only=True) as store:
        table = store.deadline(rounds, d, block=rounds, samples=8000)
    return {"tasks": len(times), "rounds": rounds, "deadline_s": round(d, 4),
            "share_met": round(share, 4),
            "predicted_blocks": float(table["p_meet_blocks"][0]),
            "predicted_independent": float(table["p_meet_independent"][0]),
            "points_off_blocks": round(100 * (float(table["p_meet_blocks"][0]) - share), 2),
            "points_off_independent": round(100 * (float(table["p_meet_independent"][0]) - share), 2)}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=os.path.join(HERE, "out", "agent"))
    parser.add_argument("--quick", action="store_true", help="a few seconds each")
    parser.add_argument("--only", choices=("tiers", "redo", "deadline"), default=None)
    a = parser.parse_args()
    results = {}
    for name, fn in (("tiers", tiers), ("redo", redo), ("deadline", deadline)):
        if a.only in (None, name):
            results[name] = fn(os.path.join(a.out, name), a.quick)
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
