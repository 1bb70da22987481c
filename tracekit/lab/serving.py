"""A static-batching model server on a virtual clock: writes the serving events
tracekit reads (batch_start, request_start, token, request_finished).

Not a model: a cost model of one (docs/timing-model.md). A batch of B requests is
prefilled first (`prefill_ms` per member), then each decode step emits one
token for every unfinished member; a step costs `step_ms` up to the device's
balance point (`balance` members) and grows linearly above it. Results
return when the whole batch is done. Token counts are drawn from a seeded
geometric-like mix of short and long answers, so batches mix both.

    python -m tracekit.lab.serving OUT.jsonl [--seed 1]
"""

import argparse
import json
import random
import signal

BASE_NS = 1_800_000_000_000_000_000


def step_ms(batch_size, step=10.0, balance=4):
    return step * max(1.0, batch_size / balance)


def simulate(batch_sizes=(1, 2, 4, 8, 16), batches=3, prefill_ms=5.0, seed=1, run="serving"):
    """Yield event dicts (ts in ns) for `batches` batches of each size."""
    rng = random.Random(seed)
    t = 0.0
    for size in batch_sizes:
        for k in range(batches):
            batch = f"b{size}-{k}"
            tokens = [rng.choice((8, 16, 32)) if rng.random() < 0.7 else rng.choice((96, 128))
                      for _ in range(size)]
            yield {"ts": BASE_NS + round(t * 1e6), "kind": "batch_start", "batch": batch,
                   "batch_size": size, "run": run}
            for i in range(size):
                yield {"ts": BASE_NS + round(t * 1e6), "kind": "request_start",
                       "request": f"{batch}-{i}", "batch": batch, "run": run}
            first = t + prefill_ms * size
            step = step_ms(size)
            end = first + (max(tokens) - 1) * step
            for n in range(max(tokens)):
                for i, need in enumerate(tokens):
                    if n < need:
                        yield {"ts": BASE_NS + round((first + n * step) * 1e6), "kind": "token",
                               "request": f"{batch}-{i}", "batch": batch, "index": n, "run": run}
            for i, need in enumerate(tokens):
                yield {"ts": BASE_NS + round(end * 1e6), "kind": "request_finished",
                       "request": f"{batch}-{i}", "batch": batch, "tokens": need, "run": run}
            t = end + 50.0


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m tracekit.lab.serving")
    p.add_argument("out")
    p.add_argument("--seed", type=int, default=1)
    a = p.parse_args(argv)
    with open(a.out, "w") as f:
        for event in simulate(seed=a.seed):
            f.write(json.dumps(event) + "\n")


if __name__ == "__main__":
    # Ctrl-C is the lab's to handle: it stops this process (SIGTERM) and cleans up
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    main()
