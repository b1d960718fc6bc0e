"""QuarantineMarks (pipeline/store/writer.py): when a batch may skip the quarantine anti-join; and the
Kafka-coordinate predicate that picks the rows a batch stores. The Spark side (loading the maxima,
the restricted anti-join, the rows picked) runs in tests/integration/test_store_job.py (reset
checkpoint, re-produced records)."""
from __future__ import annotations

from pipeline.store.writer import QuarantineMarks


def marks(start: dict[int, int]) -> QuarantineMarks:
    m = QuarantineMarks("unused", "waku.messages")
    m.marks = dict(start)  # as loaded from the table
    return m


def test_new_offsets_above_every_mark_skip_the_anti_join():
    m = marks({0: 10, 1: 5})
    assert m.all_above({0: (11, 20), 1: (6, 6)})
    assert m.all_above({2: (0, 3)})  # a partition the table has never seen


def test_any_offset_at_or_below_a_mark_needs_the_anti_join():
    m = marks({0: 10, 1: 5})
    assert not m.all_above({0: (10, 20)})            # a re-run batch
    assert not m.all_above({0: (11, 20), 1: (0, 9)})  # a reset checkpoint re-reading partition 1


def test_marks_rise_with_each_write_and_never_fall():
    m = marks({})
    assert m.all_above({0: (0, 4)})
    m.raise_to({0: (0, 4)})
    assert m.marks == {0: 4}
    assert not m.all_above({0: (3, 8)})  # the same batch run again
    m.raise_to({0: (1, 2), 1: (7, 9)})
    assert m.marks == {0: 4, 1: 9}


def test_coordinates_are_packed_as_coordinate_set_reads_them():
    """12 bytes a pair: big-endian int32 partition, big-endian int64 offset (CoordinateSet.java)."""
    import struct

    from pipeline.store.writer import pack_coordinates

    coords = {(1, 9), (0, 3), (1, 2), (0, 2**62 + 5), (7, 0)}
    packed = pack_coordinates(coords)
    assert len(packed) == 12 * len(coords)
    assert {struct.unpack(">iq", packed[i:i + 12]) for i in range(0, len(packed), 12)} == coords
    assert pack_coordinates(set()) == b""
