"""What a report is about: a run, an experiment and labels (`--run`,
`--experiment`, `--where`), matched as the views match them -- a request's
run is its `run` label, else its events' run field -- and the request keys,
captures, logs and runs that fall inside."""

from dataclasses import dataclass, field

from ..core.errors import TracekitError

_REQUESTS = """
    SELECT request_key, coalesce(labels['run'], run) AS run, labels['experiment'] AS experiment,
           capture_id, log_id
    FROM requests r
    WHERE ($run IS NULL OR coalesce(r.labels['run'], r.run) = $run)
      AND ($experiment IS NULL OR r.labels['experiment'] = $experiment)
      AND len(list_filter(list_zip($keys, $values),
                          lambda kv: r.labels[kv[1]] IS DISTINCT FROM kv[2])) = 0
    ORDER BY start_ns, request_key"""
_LABELLED = """
    SELECT {id} FROM {table} t
    WHERE ($run IS NULL OR t.labels['run'] = $run)
      AND ($experiment IS NULL OR t.labels['experiment'] = $experiment)
      AND len(list_filter(list_zip($keys, $values),
                          lambda kv: t.labels[kv[1]] IS DISTINCT FROM kv[2])) = 0"""


@dataclass
class Scope:
    run: "str | None" = None
    experiment: "str | None" = None
    where: dict = field(default_factory=dict)
    requests: list = field(default_factory=list)  # (key, run, experiment, capture, log)
    captures: list = field(default_factory=list)
    logs: list = field(default_factory=list)

    @property
    def everything(self):
        return self.run is None and self.experiment is None and not self.where

    def labels(self):
        """The labels a request must carry ({label: value}), as `--where` takes them."""
        out = dict(self.where)
        if self.experiment is not None:
            out["experiment"] = self.experiment
        if self.run is not None:
            out["run"] = self.run
        return out

    def describe(self):
        """"run=a, experiment=b, x=y", or "the whole store"."""
        return ", ".join(f"{k}={v}" for k, v in self.labels().items()) or "the whole store"

    @property
    def keys(self):
        return [r[0] for r in self.requests]

    @property
    def runs(self):
        return sorted({r[1] for r in self.requests if r[1] is not None}
                      | ({self.run} if self.run else set()))


def resolve(con, run=None, experiment=None, where=None):
    """The Scope of these filters; an error when nothing in the store matches."""
    s = Scope(run, experiment, dict(where or {}))
    params = {"run": run, "experiment": experiment, "keys": list(s.where),
              "values": [str(v) for v in s.where.values()]}
    s.requests = con.execute(_REQUESTS, params).fetchall()
    captures = {r[0] for r in con.execute(_LABELLED.format(id="capture_id", table="captures"),
                                          params).fetchall()}
    logs = {r[0] for r in con.execute(_LABELLED.format(id="log_id", table="event_logs"),
                                      params).fetchall()}
    s.captures = sorted(captures | {r[3] for r in s.requests if r[3] is not None})
    s.logs = sorted(logs | {r[4] for r in s.requests if r[4] is not None})
    streams = con.execute("SELECT (SELECT count(*) FROM playback WHERE run = $r) + (SELECT "
                          "count(*) FROM serving_batches WHERE run = $r)", {"r": run}
                          ).fetchall()[0][0] if run else 0
    if not (s.requests or s.captures or s.logs or streams):
        if run and con.execute("SELECT count(*) FROM runs WHERE experiment = ?",
                               [run]).fetchall()[0][0]:
            raise TracekitError(f"no run {run!r} in the store; it is an experiment: "
                                f"--experiment {run}")
        what = f"run {run!r}" if run else f"experiment {experiment!r}" if experiment else None
        raise TracekitError(f"no {what} in the store (tracekit attribute lists the runs)" if what
                            else f"nothing in the store matches {s.describe()}")
    return s
