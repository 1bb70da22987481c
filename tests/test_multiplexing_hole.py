"""The scripted hole of experiments/multiplexing.toml in its committed runs
(captures/multiplexing, issue #27), read with tshark alone: where the
forwarder's scripted drop fell in each HTTP/2 lossy run's byte stream."""

import json
import os
import shutil
import subprocess

import pytest

HERE = os.path.join(os.path.dirname(__file__), "..", "captures", "multiplexing")


def _tshark_records(capture, keylog):
    """[(first copy's TCP sequence numbers of the segments a record came in, its DATA
    frames' stream ids)] of the server's records, by tshark's reassembly and decryption."""
    out = subprocess.run(["tshark", "-r", capture, "-o", f"tls.keylog_file:{keylog}",
                          "-o", "tcp.reassemble_out_of_order:TRUE",
                          "-o", "tcp.relative_sequence_numbers:FALSE",
                          "-d", "tcp.port==9300,tls", "-Y", "tcp.srcport==9300 && tcp.len>0",
                          "-T", "fields", "-e", "frame.number", "-e", "tcp.seq",
                          "-e", "http2.streamid", "-e", "http2.type", "-e", "tcp.segment",
                          "-E", "occurrence=a"], capture_output=True, text=True, check=True).stdout
    seq, records = {}, []
    for line in out.splitlines():
        frame, sq, sids, types, segments = line.split("\t")
        seq[frame] = int(sq)
        if sids:
            data = {sid for sid, kind in zip(sids.split(","), types.split(",")) if kind == "0"}
            records.append(([seq[f] for f in (segments.split(",") if segments else [frame])], data))
    return records


@pytest.mark.skipif(not shutil.which("tshark"), reason="tshark is not installed")
def test_the_scripted_hole_is_an_image_segment_before_the_audios_end():
    """The experiment's design, read with tshark (not tracekit): in every HTTP/2
    lossy run the segment the forwarder's scripted rule dropped (drops.jsonl)
    lies in a TLS record with image data -- with priority, image data only --
    and the audio's last chunk came after it in the byte stream, whichever
    layout the run's random losses made. (Under FIFO the server wrote the
    image's tail and the first chunk in one record: the record holding the
    hole carries both, although the segment's own bytes are the image's.)"""
    with open(os.path.join(HERE, "multiplexing.runs.json")) as f:
        manifests = {m["run"]: m for m in json.load(f)}
    checked = 0
    for run, m in manifests.items():
        if m["factors"]["protocol"] != "h2" or m["factors"]["loss_down"] == 0.0:
            continue
        folder = os.path.join(HERE, run)
        with open(os.path.join(folder, "drops.jsonl")) as f:
            hole = next(json.loads(line)["tcp_seq"] for line in f
                        if json.loads(line)["reason"] == "scripted")
        records = _tshark_records(os.path.join(folder, "server.pcap"),
                                  os.path.join(folder, "keys.log"))
        base = records[0][0][0]   # the server's first record: positions relative to it
        carrying = [data for segs, data in records if hole in segs]
        assert carrying and all("1" in data for data in carrying), (run, carrying)
        if m["factors"]["scheduling"] == "priority":
            assert all(data == {"1"} for data in carrying), (run, carrying)
        last_chunk = max(min((x - base) % (1 << 32) for x in segs)
                         for segs, data in records if "3" in data)
        assert last_chunk > (hole - base) % (1 << 32), run
        checked += 1
    assert checked == 4
