"""Capture readers: formats, byte orders, resolutions, bad files, chunking."""

import io

import numpy as np
import pytest
from pcapgen import block, epb, idb, pb, pcap_bytes, shb, spb

from tracekit.core.errors import CaptureFormatError, NotACaptureError
from tracekit.readers.capture import open_capture

ETH_IPV4_TCP = bytes.fromhex(
    "0200000000010200000000020800"  # Ethernet
    "45000028000140004006" "0000" "c6120001c6120002"  # IPv4 198.18.0.1 -> 198.18.0.2
    "04d20050000003e80000000050022000" "00000000")  # TCP 1234 -> 80, SYN


def read_all(data, name="x.pcap", **kw):
    reader = open_capture(name, io.BytesIO(data), **kw)
    rows = []
    for b in reader.batches():
        for i in range(len(b)):
            off = b.data_offset[i]
            rows.append((b.first_frame + i, int(b.ts_ns[i]), int(b.interface_id[i]),
                         bytes(b.data[off:off + b.captured_bytes[i]]), int(b.wire_bytes[i]),
                         int(b.file_offset[i])))
    return reader, rows


@pytest.mark.parametrize("big_endian", [False, True])
@pytest.mark.parametrize("nanoseconds", [False, True])
def test_read_pcap_byte_orders_and_resolutions(big_endian, nanoseconds):
    ts = [1_700_000_000_123_456_789, 1_700_000_001_000_001_000]
    data = pcap_bytes([(t, ETH_IPV4_TCP) for t in ts], big_endian=big_endian,
                      nanoseconds=nanoseconds, snaplen=128)
    reader, rows = read_all(data)
    expect = ts if nanoseconds else [t // 1000 * 1000 for t in ts]
    assert [r[1] for r in rows] == expect
    assert [r[3] for r in rows] == [ETH_IPV4_TCP] * 2
    assert reader.byte_order == ("big" if big_endian else "little")
    assert reader.interfaces[0].snaplen == 128
    assert reader.interfaces[0].ts_resolution == ("1e-9" if nanoseconds else "1e-6")
    assert [r[5] for r in rows] == [24, 24 + 16 + len(ETH_IPV4_TCP)]
    assert reader.stop is None


def test_read_pcap_truncated_last_record_reports_offset():
    data = pcap_bytes([(1, ETH_IPV4_TCP)] * 3)
    cut = data[:-10]
    reader, rows = read_all(cut)
    assert len(rows) == 2
    second_end = 24 + 2 * (16 + len(ETH_IPV4_TCP))
    assert reader.stop.reason == "truncated"
    assert reader.stop.offset == second_end
    assert reader.stop.message == (
        "the last record is cut short: 60 of 70 bytes present (the file ends inside record 3)")


def test_read_pcap_impossible_length_stops_without_guessing():
    data = bytearray(pcap_bytes([(1, ETH_IPV4_TCP)] * 3))
    bad = 24 + 16 + len(ETH_IPV4_TCP)
    data[bad + 8:bad + 12] = (10_000_000).to_bytes(4, "little")
    reader, rows = read_all(bytes(data))
    assert len(rows) == 1
    assert reader.stop.reason == "corrupt"
    assert reader.stop.offset == bad
    assert "record 2 claims 10000000 captured bytes" in reader.stop.message


def test_read_pcap_empty_capture_is_not_an_error():
    reader, rows = read_all(pcap_bytes([]))
    assert rows == [] and reader.stop is None


def test_not_a_capture_names_the_magic():
    with pytest.raises(NotACaptureError) as e:
        open_capture("notes.txt", io.BytesIO(b"This is text\n"))
    assert str(e.value) == (
        "notes.txt is not a pcap or pcapng capture: its first bytes are 54686973 ('This'); "
        "expected the magic a1b2c3d4 or a1b23c4d in either byte order (pcap) or 0a0d0d0a (pcapng)")


def test_empty_file_is_not_a_capture():
    with pytest.raises(NotACaptureError, match="the file is empty"):
        open_capture("e.pcap", io.BytesIO(b""))


def test_pcap_header_cut_short():
    with pytest.raises(CaptureFormatError) as e:
        open_capture("h.pcap", io.BytesIO(pcap_bytes([])[:20]))
    assert str(e.value) == "h.pcap: at byte offset 0: the pcap file header is cut short: 20 of 24 bytes present"


def _pcapng_two_sections():
    # section 1, little-endian: Ethernet (us) and raw IP with 2^-20 s units and an offset
    s1 = (shb("<") + idb(1, 65535, e="<") + idb(101, 128, tsresol=0x80 | 20, tsoffset=100, e="<")
          + epb(0, 1_700_000_000_000_001, ETH_IPV4_TCP, e="<")
          + block(4, b"\x00" * 8, "<")  # name resolution block: skipped, counted
          + epb(1, 3 << 20 | (1 << 19), ETH_IPV4_TCP[14:], e="<")
          + spb(ETH_IPV4_TCP, e="<")
          + pb(0, 1_700_000_000_000_002, ETH_IPV4_TCP, e="<"))
    # section 2, big-endian: one interface with nanosecond resolution
    s2 = (shb(">") + idb(1, 0, tsresol=9, e=">")
          + epb(0, 1_700_000_000_000_000_007, ETH_IPV4_TCP, e=">")
          + block(0x00000BAD, b"\x00" * 8, ">"))
    return s1 + s2


def test_read_pcapng_sections_interfaces_resolutions():
    reader, rows = read_all(_pcapng_two_sections(), "x.pcapng")
    assert [r[2] for r in rows] == [0, 1, 0, 0, 2]
    assert rows[0][1] == 1_700_000_000_000_001_000
    assert rows[1][1] == 103_500_000_000  # 3.5 s in 2^-20 units, plus the 100 s offset
    assert rows[2][1] == 0  # an SPB carries no timestamp
    assert rows[3][1] == 1_700_000_000_000_002_000
    assert rows[4][1] == 1_700_000_000_000_000_007
    assert rows[1][3] == ETH_IPV4_TCP[14:]
    assert [i.link_type for i in reader.interfaces] == [1, 101, 1]
    assert [i.ts_resolution for i in reader.interfaces] == ["1e-6", "2^-20", "1e-9"]
    assert [i.section for i in reader.interfaces] == [0, 0, 1]
    assert reader.byte_order == "big/little"
    assert reader.sections == 2
    assert reader.stats.skipped_blocks == {"name resolution block": 1, "custom block": 1}
    assert reader.stop is None


def test_read_pcapng_spb_uses_snaplen_of_interface_0():
    data = shb() + idb(1, 20) + spb(ETH_IPV4_TCP[:20], wire_len=len(ETH_IPV4_TCP))
    _, rows = read_all(data, "x.pcapng")
    assert len(rows[0][3]) == 20 and rows[0][4] == len(ETH_IPV4_TCP)


def test_read_pcapng_bad_block_length_stops():
    good = shb() + idb(1) + epb(0, 1, ETH_IPV4_TCP)
    bad = bytearray(epb(0, 2, ETH_IPV4_TCP))
    bad[4:8] = (13).to_bytes(4, "little")  # not a multiple of 4
    reader, rows = read_all(good + bytes(bad) + epb(0, 3, ETH_IPV4_TCP), "x.pcapng")
    assert len(rows) == 1
    assert reader.stop.reason == "corrupt"
    assert reader.stop.offset == len(good)


def test_read_pcapng_truncated_block():
    data = shb() + idb(1) + epb(0, 1, ETH_IPV4_TCP) + epb(0, 2, ETH_IPV4_TCP)
    reader, rows = read_all(data[:-8], "x.pcapng")
    assert len(rows) == 1
    assert reader.stop.reason == "truncated"


def test_read_pcapng_packet_on_undescribed_interface():
    data = shb() + idb(1) + epb(5, 1, ETH_IPV4_TCP)
    _, rows = read_all(data, "x.pcapng")
    assert rows[0][2] == -1


@pytest.mark.parametrize("batch", [1, 7, 1 << 18])
@pytest.mark.parametrize("chunk", [64, 1000, 32 << 20])
def test_batching_and_chunking_never_change_the_records(batch, chunk):
    """h11's discipline: how the input is cut up must not change the result."""
    packets = [(1_000_000_000 * i, ETH_IPV4_TCP[: 40 + i % 14]) for i in range(50)]
    pcap = pcap_bytes(packets)
    ng = shb() + idb(1) + b"".join(epb(0, i, p) for i, (_, p) in enumerate(packets))
    for data, name in ((pcap, "x.pcap"), (ng, "x.pcapng")):
        _, whole = read_all(data, name)
        _, cut = read_all(data, name, batch_packets=batch, chunk_bytes=chunk)
        assert cut == whole
        assert len(cut) == 50


def test_timestamps_stepping_backwards_keep_capture_order():
    ts = [5_000_000_000, 4_000_000_000, 6_000_000_000]
    _, rows = read_all(pcap_bytes([(t, ETH_IPV4_TCP) for t in ts]))
    assert [r[0] for r in rows] == [1, 2, 3]
    assert [r[1] for r in rows] == ts
    assert np.all(np.diff([r[0] for r in rows]) == 1)


def test_pcapng_snaplen_is_a_32_bit_field(tmp_path):
    """Found by the fuzz test: an IDB snaplen above 2^31 must still be stored."""
    from tracekit.pipeline.captures import load_captures
    from tracekit.store.db import connect

    path = tmp_path / "big-snaplen.pcapng"
    path.write_bytes(shb() + idb(1, snaplen=2147745792) + epb(0, 1, ETH_IPV4_TCP))
    con = connect(tmp_path / "s.duckdb")
    load_captures(con, [path])
    assert con.execute("SELECT snaplen FROM interfaces").fetchall() == [(2147745792,)]
    assert con.execute("SELECT snaplen FROM captures").fetchall() == [(2147745792,)]


def test_timestamp_units_finer_than_uint64():
    """if_tsresol may say 2^-127 s (found by the fuzz test): every raw value is
    then far below a nanosecond, and the conversion must not overflow."""
    import numpy as np

    from tracekit.readers.capture.base import timestamps_from_units
    raw = np.array([0, 1, 2**63, 2**64 - 1], np.uint64)
    assert timestamps_from_units(raw, 2**127)[0].tolist() == [0, 0, 0, 0]
    assert timestamps_from_units(raw, 10**30, offset_s=5)[0].tolist() == [5 * 10**9] * 4
    ns, bad = timestamps_from_units(np.array([3 * 2**20 + 2**19], np.uint64), 2**20)
    assert ns.tolist() == [3_500_000_000] and not bad.any()
