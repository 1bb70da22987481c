"""What a live flow costs while a capture is ingested, from the arrays' dtypes
and shapes (not from RSS: no timing, no machine noise).

A scan whose flows all stay live to the end (20,000 one-SYN flows at 100,000
a second: none is over) is ingested; the flow table and the payload keeper
are weighed just before the table is let go. A flow's row is 226 bytes
(endpoints once, counters by their range: int64 / int32 / int8, decode/flows.py);
rows grow by a sixteenth, and the hash table holds 4-byte row numbers at most
half full (2 to 4 slots a flow). The payload keeper holds 17 bytes for a
flow that carried no data. Before this change a flow cost 296 bytes of rows
grown by half, plus 96 bytes a hash slot, plus 65 bytes in the keeper --
some 700 bytes, which put a 1.5 M-flow scan at 1.36 GiB (benchmarks/scan.py).
"""


import numpy as np

import tracekit.pipeline.captures as captures
from tracekit import api
from tracekit.readers.decode import flows as flowtable

from pcapgen import pcap_bytes, scan_syn as _syn

N, RATE, T0 = 20_000, 100_000, 1_700_000_000 * 10**9


def _weighed(tmp_path, monkeypatch):
    seen = {}

    class Table(flowtable.FlowTable):
        def flows(self):
            seen["live"], seen["table"] = self.live(), self.nbytes()
            seen["arrays"] = {name: getattr(self, name) for name in flowtable.DTYPES}
            seen["slots"] = self.slots
            return super().flows()

    class Keeper(captures.PayloadKeeper):
        def __init__(self):
            super().__init__()
            seen["keeper"] = self

    monkeypatch.setattr(captures, "FlowTable", Table)
    monkeypatch.setattr(captures, "PayloadKeeper", Keeper)
    path = tmp_path / "scan.pcap"
    path.write_bytes(pcap_bytes([(T0 + i * 10**9 // RATE, _syn(i)) for i in range(N)]))
    api.ingest(tmp_path / "s.duckdb", [path])
    keeper = seen["keeper"]
    seen["keeper"] = sum(getattr(keeper, a).nbytes for a in keeper.FILL)
    return seen


def test_a_live_flow_costs_its_row_and_a_few_hash_slots(tmp_path, monkeypatch):
    seen = _weighed(tmp_path, monkeypatch)
    assert seen["live"] == N  # every flow still in the table
    # the row's bytes from the arrays themselves, and what the docs say
    row = sum(a.dtype.itemsize * int(np.prod(a.shape[1:])) for a in seen["arrays"].values())
    assert row == flowtable.ROW_BYTES == 226
    assert seen["slots"].dtype == np.int32 and 2 * N <= len(seen["slots"]) <= 4 * N
    rows = len(seen["arrays"]["ids"])
    assert N <= rows <= N * 17 // 16 + 1024
    per_flow = seen["table"] / N
    assert per_flow == (rows * row + 4 * len(seen["slots"])) / N
    assert per_flow <= 226 * 17 / 16 + 16 + 1024 * 226 / N  # 282 bytes here; was ~700
    # a flow that carried no data: its state and two sequence bases
    assert seen["keeper"] / N <= 17 * 9 / 8 + 1024 * 17 / N
