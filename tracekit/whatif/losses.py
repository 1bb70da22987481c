"""The response direction's random loss, for the calibration
(whatif/calibrate.py): of the segments a trace shows retransmitted, which
were lost at random and which were the queue's (lost at a full queue by
whatif/queueing.py; in a flow whose waits it could not read, runs of
`QUEUE_RUN` in a row), the random rate, its burstiness and the share a
burst loses (whatif/chain.py)."""

from . import chain

BAD_LOSS = True  # a burst may skip packets (off: Gilbert's chain, every packet in it lost)
QUEUE_RUN = 3  # consecutive segments lost: the queue overflowed (P = p^3 at random)
RUNS_BY_WITNESS = True  # a timed flow's runs judged by their witness alone (off: by QUEUE_RUN)


def flows_of(df):
    """The (capture, flow)s of a group's requests (a frame of them, those with
    a flow): what `read` takes."""
    return list({(int(c), int(f)) for c, f in zip(df.capture_id, df.flow_id) if f == f})


def read(con, flows, src, est, full=None, shares=None, timed=()):
    """(random loss rate, burstiness, the share a burst loses) of the response
    direction. Segments lost at a full queue by their witness's wait (`full`,
    {flow: seqs}: whatif/queueing.py) are the bottleneck's queue overflowing
    (the replay's queue makes those itself): counted apart. In flows not
    `timed` (no waits read) so are those lost in a run of QUEUE_RUN or more
    in a row, when there are more of them than twice what random loss would
    put in runs (bursts of random loss make runs too: in a timed flow its
    witness decides, set 18). A random loss that falls while the
    queue is full looks like the queue's, so where that reading holds the
    rate is the random losses over the segments that did not arrive at a
    full queue (`shares`, {flow: share that did}): BBR under 1 % random loss
    filling its queue a third of the time read 0.51 % over all of them."""
    full, shares, timed = full or {}, shares or {}, set(timed)
    lost = sent = overflow = 0
    trials = 0.0
    found = []
    for cap, fl in flows:
        rows = con.execute("""SELECT rel_seq FROM retransmissions
            WHERE capture_id = ? AND flow_id = ? AND direction = 's2c'
              AND NOT coalesce(spurious, false)""", [cap, fl]).fetchall()
        n = con.execute("""SELECT count(DISTINCT rel_seq) FROM tcp_analysis WHERE capture_id = ?
            AND flow_id = ? AND NOT from_client AND payload_bytes > 0""", [cap, fl]).fetchone()[0]
        step = segment_step(con, cap, fl)
        seqs = {r[0] for r in rows}
        # a flow whose queue's waits were read (`timed`): its witnesses say which
        # losses were the queue's, a run or not (bursts of random loss make runs)
        runs = set() if RUNS_BY_WITNESS and (cap, fl) in timed else in_runs(seqs, step)
        found.append(([r[0] for r in rows], runs, step, full.get((cap, fl), set())))
        sent += n  # every segment's first copy is one trial; a lost copy is seen
        #            only through the retransmission that arrived
        trials += n * (1.0 - shares.get((cap, fl), 0.0))
    total = sum(len(r) for r, _, _, _ in found)
    p_all = total / sent if sent else 0.0
    runs = sum(1 for r, q, _, _ in found for x in r if x in q)
    # random loss alone puts about 3 p^2 of its losses in such runs
    queue = runs > 2 * total * min(1.0, 3 * p_all ** 2)
    pairs = both = both2 = 0
    for r, q, step, at_full in found:
        random = [x for x in r if not ((queue and x in q) or x in at_full)]
        lost += len(random)
        overflow += len(r) - len(random)
        rs = set(random)
        pairs += len(rs)
        both += sum(1 for x in rs if x - step in rs)
        both2 += sum(1 for x in rs if x - 2 * step in rs)
    loss = min(lost / trials, 1.0) if trials > 0 else 0.0
    cond = both / pairs if pairs else 0.0
    est.update(loss_down=loss, loss_segments=lost, queue_drops=overflow, segments=sent,
               burst=cond, burst_second=both2 / pairs if pairs else 0.0)
    hidden = sent - trials
    if hidden >= 0.5:
        est["segments_at_full_queue"] = hidden
    how = [f"in runs of >= {QUEUE_RUN}"] if any(
        not (RUNS_BY_WITNESS and k in timed) for k in flows) else []
    if full:
        how.append("lost at a full queue")  # (by the wait of the segment before them)
    src["loss_down"] = (f"{lost} of {sent} response segments retransmitted (not spurious), "
                        + (f"{overflow} more {' or '.join(how)}: the queue's" if how else
                           "none at a full queue (by the wait of the segment before each)")
                        + (f"; over the {trials:.0f} that did not arrive at a full queue "
                           "(a random loss there looks like the queue's)" if hidden >= 0.5
                           else ""))
    burst = min(cond, 0.5) if pairs >= 10 and cond > 2 * loss else 0.0
    # (read from the burstiness as measured: the cap is on the chain's P(lost | lost))
    bad_loss = chain.bad_loss_of(loss, cond, est["burst_second"]) if BAD_LOSS and burst else 1.0
    if burst:
        src["bad_loss"] = (f"P(lost | lost two before) {est['burst_second']:.3f} against "
                           f"{chain.second(loss, cond, 1.0):.3f} were every packet of a burst "
                           "lost: the share a burst loses (whatif/chain.py)")
    return loss, burst, bad_loss


def in_runs(seqs, step):
    """The sequence numbers that are part of a run of QUEUE_RUN or more lost in a row."""
    out = set()
    for s in seqs:
        if s - step in seqs:
            continue
        run = [s]
        while run[-1] + step in seqs:
            run.append(run[-1] + step)
        if len(run) >= QUEUE_RUN:
            out.update(run)
    return out


def segment_step(con, cap, fl):
    r = con.execute("""SELECT mode(payload_bytes) FROM tcp_analysis WHERE capture_id = ?
        AND flow_id = ? AND NOT from_client AND payload_bytes > 0""", [cap, fl]).fetchone()
    return int(r[0] or 1448)
