"""Ingest's kernels loaded on a thread beside the store's opening
(tracekit/readers/preload.py, tracekit.core.jit.preload)."""

from pathlib import Path

from tracekit.core import jit
from tracekit.pipeline.captures import load_captures
from tracekit.readers import preload
from tracekit.readers.capture import scan
from tracekit.readers.decode import flows
from tracekit.store.db import connect

SAMPLES = Path(__file__).resolve().parents[1] / "captures"
PCAP, PCAPNG = SAMPLES / "lossy-download-client.pcap", SAMPLES / "udp-echo.pcapng"
KERNELS = (scan.scan_pcap, scan.scan_pcapng, flows._track, flows._rehash)


def test_preloaded_kernels_are_the_ones_ingest_calls(tmp_path, monkeypatch):
    """The one-packet captures give each kernel the argument types a real
    ingest gives it: the ingest after the load compiles nothing more (other
    types would be a signature of their own, compiled anew on the very path
    the load was meant to clear). Fails when the load passes one argument
    of another type (tried: the timestamps as int32)."""
    monkeypatch.setenv("TRACEKIT_JIT", "always")
    monkeypatch.setattr(jit, "_aot_enabled", False)  # through numba (core/aot.py aside)
    for k in KERNELS:
        monkeypatch.setattr(k, "_ahead", False)
    assert preload.formats_of([PCAP, tmp_path / "missing.pcap", PCAPNG]) == ["pcap", "pcapng"]
    assert preload.formats_of([PCAPNG]) == ["pcapng"]
    preload.load_kernels([PCAP, PCAPNG])
    loaded = {k.__name__: set(k.compiled().signatures) for k in KERNELS}
    assert all(loaded.values())
    con = connect(tmp_path / "s.duckdb")
    out = load_captures(con, [PCAP, PCAPNG])
    assert [s.packets for s in out] == [
        con.execute("SELECT count(*) FROM packets WHERE capture_id = ?", [s.capture_id]).fetchone()[0]
        for s in out] and all(s.packets for s in out)
    con.close()
    assert {k.__name__: set(k.compiled().signatures) for k in KERNELS} == loaded


def test_preload_starts_once_and_only_for_compiled_kernels(monkeypatch):
    calls = []
    monkeypatch.setattr(jit, "_preloading", None)
    monkeypatch.setattr(jit, "_loaded", False)
    jit.preload(calls.append, "small")  # Python kernels chosen: nothing to load
    assert jit._preloading is None and calls == []
    monkeypatch.setattr(jit, "_loaded", True)
    jit.preload(calls.append, "first")
    jit.preload(calls.append, "second")
    jit._preloading.join()
    assert calls == ["first"]
    failing = []
    monkeypatch.setattr(jit, "_preloading", None)

    def boom(arg):
        failing.append(arg)
        raise ValueError("left to the caller's own call")

    jit.preload(boom, "x")  # (a failure on the thread is swallowed)
    jit._preloading.join()
    assert failing == ["x"]
    # nothing to load when every kernel named was compiled ahead (core/aot.py)
    monkeypatch.setattr(jit, "_preloading", None)

    class Ahead:
        def ahead(self):
            return len

    jit.preload(calls.append, "third", kernels=(Ahead(), Ahead()))
    assert jit._preloading is None and calls == ["first"]
