"""tracekit.model's streams on one link, on the chapter's example (issue #27):
an image of 5 s of link time ready at 0, an audio of 1 s ready at 2 s."""

import pytest

from tracekit import model

RATE = 1000.0              # bytes/s: 5,000 bytes of image = 5 s of link
IMAGE, AUDIO = 0, 1
SIZES, READY = [5000, 1000], [0.0, 2.0]


def test_fifo_sends_the_image_whole_then_the_audio():
    pieces = model.link_schedule(SIZES, READY, RATE)
    first, last = model.stream_schedule(pieces, 2)
    assert [(p.stream, p.start, p.end) for p in pieces] == [(IMAGE, 0, 5), (AUDIO, 5, 6)]
    assert last.tolist() == [5.0, 6.0] and first.tolist() == [0.0, 5.0]


def test_priority_cuts_the_image_when_the_audio_is_ready():
    pieces = model.link_schedule(SIZES, READY, RATE, priority=[1, 0])
    assert [(p.stream, p.start, p.end, p.offset, p.size) for p in pieces] == [
        (IMAGE, 0, 2, 0, 2000), (AUDIO, 2, 3, 0, 1000), (IMAGE, 3, 6, 2000, 3000)]
    _, last = model.stream_schedule(pieces, 2)
    assert last.tolist() == [6.0, 3.0]   # audio 3 s earlier, image 1 s later


def test_bytes_already_committed_go_before_the_urgent_stream():
    # 500 bytes (0.5 s) already handed on when the audio is ready at 2 s: the cut is at 2.5 s
    pieces = model.link_schedule(SIZES, READY, RATE, priority=[1, 0], committed=500)
    assert [(p.stream, p.start, p.end, p.size) for p in pieces] == [
        (IMAGE, 0, 2.5, 2500), (AUDIO, 2.5, 3.5, 1000), (IMAGE, 3.5, 6, 2500)]


def test_a_hole_early_in_the_image_holds_the_audio_only_under_one_byte_stream():
    pieces = model.link_schedule(SIZES, READY, RATE, priority=[1, 0])
    hole = [(IMAGE, 100, 7.0)]          # a byte of the image's first piece repaired at 7 s
    complete, one = model.delivery_times(pieces, 2, holes=hole, order="connection")
    _, per_stream = model.delivery_times(pieces, 2, holes=hole, order="stream")
    assert complete.tolist() == [7.0, 3.0]
    assert one.tolist() == [7.0, 7.0]          # HTTP/2: the audio handed over at 7 s
    assert per_stream.tolist() == [7.0, 3.0]   # HTTP/3: at 3 s
    assert (one - complete)[AUDIO] == 4.0      # 4 s of head-of-line time
    # a hole after the audio's bytes (in the image's second piece) holds nothing of it
    _, late = model.delivery_times(pieces, 2, holes=[(IMAGE, 4000, 7.0)])
    assert late[AUDIO] == 3.0
    with pytest.raises(ValueError):
        model.delivery_times(pieces, 2, order="fifo")


def test_eight_audio_chunks_are_on_time_only_when_prioritised():
    rate, delay = 100_000.0, 0.05            # image 500,000 bytes = 5 s; a chunk 320 bytes
    n = 8
    sizes = [500_000] + [320] * n
    ready = [0.0] + [0.02 * k for k in range(n)]
    play = [0.4 + 0.02 * k for k in range(n)]

    def audio_on_time(priority):
        pieces = model.link_schedule(sizes, ready, rate, priority)
        complete, _ = model.delivery_times(pieces, len(sizes), delay=delay, order="stream")
        return model.on_time_seconds(complete[1:], play, 0.02), complete[1:]

    fifo, fifo_arrivals = audio_on_time(None)
    prio, prio_arrivals = audio_on_time([1] + [0] * n)
    assert fifo == 0.0 and min(fifo_arrivals) > 5.0
    assert prio == pytest.approx(0.16)
    assert prio_arrivals[0] == pytest.approx(0.0032 + delay)


def test_a_gated_sender_puts_its_gate_less_a_round_trip_ahead_of_an_urgent_chunk():
    """docs/timing-model.md: 8,192 gated bytes and half a 4,096-byte piece,
    less 20 ms at 180,992 bytes/s already past the bottleneck; a chunk ready
    at 0.1 s while the image keeps the link busy leaves that many bytes'
    time later, then takes its own."""
    ahead = model.gated_ahead(8192, 4096, 180_992, 0.020)
    assert ahead == 8192 + 2048 - 180_992 * 0.020
    assert model.gated_ahead(1000, 0, 180_992, 0.020) == 0.0   # the round trip holds more
    pieces = model.link_schedule([100_000, 960], [0.0, 0.1 + ahead / 180_992], 180_992, [1, 0])
    chunk = next(p for p in pieces if p.stream == 1)
    assert chunk.end == pytest.approx(0.1 + (ahead + 960) / 180_992)


def test_a_recovery_period_slows_what_is_queued():
    """docs/timing-model.md: the image (5 s of link time) paused from 1 to
    3 s by its sender's loss recovery. FIFO, the audio waits out the pause
    (8 s, not 6); prioritised it leaves when ready (3 s) and the image's
    bytes after the pause follow it in the link's order. At half the link
    rate in the period the image has sent 1,000 + 1,000 bytes by 3 s and
    ends 3,000 bytes' time later, at 6 s (FIFO). An empty list is the
    lossless schedule."""
    sizes, ready = [5000, 1000], [0, 2]
    fifo = model.link_schedule(sizes, ready, 1000, slowed=[(1, 3, 0)])
    assert model.stream_schedule(fifo, 2)[1].tolist() == [7.0, 8.0]
    prio = model.link_schedule(sizes, ready, 1000, priority=[1, 0], slowed=[(1, 3, 0)])
    assert model.stream_schedule(prio, 2)[1].tolist() == [7.0, 3.0]
    assert [p.stream for p in prio] == [0, 1, 0]
    assert prio[2].offset == 1000 and prio[2].start == 3.0          # nothing sent in the pause
    half = model.link_schedule(sizes, ready, 1000, slowed=[(1, 3, 500)])
    assert model.stream_schedule(half, 2)[1].tolist() == [6.0, 7.0]
    assert model.link_schedule(sizes, ready, 1000, slowed=[]) == model.link_schedule(sizes, ready, 1000)
    # the queue ahead of an urgent chunk drains at the link's rate less the pace
    assert model.drained_ahead(6620, 180_992, 0, 0.020) == pytest.approx(6620 - 180_992 * 0.020)
    assert model.drained_ahead(6620, 180_992, 0, 0.1) == 0.0
    assert model.drained_ahead(6620, 180_992, 0, -0.01) == 6620
    assert model.drained_ahead(6620, 180_992, 200_000, 0.02) == 6620


def test_the_chance_a_hole_lies_before_an_urgent_message_written_between_pieces():
    """docs/timing-model.md: the sender writes 4,096-byte pieces; a
    schedule that puts 24,831 bytes before the message on average (6.06
    pieces, half a piece of gate phase included) has written 5 or 6 whole
    pieces first, 6 with chance 0.56 -- so a hole at byte 20,480 (the sixth
    piece) is ahead with that chance, a hole at 16,384 always, one at
    24,576 never; at 20,882 bytes (5.1 pieces) the sixth piece never is,
    the fifth with chance 0.6 and the fourth always."""
    assert model.held_chance(24_831, 20_480, 4096) == pytest.approx(24_831 / 4096 + 0.5 - 6)
    assert model.held_chance(24_831, 20_480, 4096) == pytest.approx(0.562, abs=0.001)
    assert model.held_chance(24_831, 16_384, 4096) == 1.0
    assert model.held_chance(24_831, 24_576, 4096) == 0.0
    assert model.held_chance(20_882, 20_480, 4096) == 0.0
    assert model.held_chance(20_882, 20_479, 4096) == pytest.approx(20_882 / 4096 + 0.5 - 5)
    assert model.held_chance(20_882, 16_383, 4096) == 1.0   # the fourth piece: written first
