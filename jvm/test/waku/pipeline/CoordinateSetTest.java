package waku.pipeline;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;

import java.nio.ByteBuffer;

import org.junit.jupiter.api.Test;

/** The packing is pipeline/store/writer.py's pack_coordinates: big-endian int32 partition, int64 offset. */
class CoordinateSetTest {

  static byte[] pack(long... partitionOffsetPairs) {
    ByteBuffer out = ByteBuffer.allocate(partitionOffsetPairs.length / 2 * CoordinateSet.PAIR_BYTES);
    for (int i = 0; i < partitionOffsetPairs.length; i += 2) {
      out.putInt((int) partitionOffsetPairs[i]).putLong(partitionOffsetPairs[i + 1]);
    }
    return out.array();
  }

  @Test
  void aPairIsInTheSetOnlyWithItsOwnPartition() {
    CoordinateSet set = new CoordinateSet();
    byte[] packed = pack(0, 17, 3, 5, 0, 2, 3, 1L << 40, 0, 17);  // any order, duplicates allowed
    assertEquals(true, set.call(0, 17L, packed));
    assertEquals(true, set.call(0, 2L, packed));
    assertEquals(true, set.call(3, 5L, packed));
    assertEquals(true, set.call(3, 1L << 40, packed));
    assertEquals(false, set.call(3, 17L, packed));  // 17 is partition 0's
    assertEquals(false, set.call(0, 5L, packed));
    assertEquals(false, set.call(1, 17L, packed));  // no such partition
    assertEquals(false, set.call(0, 3L, packed));
  }

  @Test
  void extremeValues() {
    byte[] packed = pack(Integer.MAX_VALUE, Long.MAX_VALUE, -1, -1, 0, 0);
    CoordinateSet set = new CoordinateSet();
    assertEquals(true, set.call(Integer.MAX_VALUE, Long.MAX_VALUE, packed));
    assertEquals(true, set.call(-1, -1L, packed));
    assertEquals(true, set.call(0, 0L, packed));
    assertEquals(false, set.call(0, Long.MIN_VALUE, packed));
  }

  @Test
  void nullsAreAsInAnInList() {
    CoordinateSet set = new CoordinateSet();
    byte[] packed = pack(0, 1);
    assertNull(set.call(null, 1L, packed));
    assertNull(set.call(0, null, packed));
    assertEquals(false, set.call(0, 1L, null));
    assertEquals(false, set.call(0, 1L, new byte[0]));
  }

  @Test
  void aSetWhoseLengthIsNotAMultipleOfTwelveIsRefused() {
    CoordinateSet set = new CoordinateSet();
    byte[] packed = java.util.Arrays.copyOf(pack(0, 1), 13);
    IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> set.call(0, 1L, packed));
    assertEquals("CoordinateSet: a packed set is 12 bytes a pair, got 13 bytes", e.getMessage());
  }

  @Test
  void anotherArrayIsUnpackedAnewEvenAfterTheSameContent() {
    CoordinateSet set = new CoordinateSet();
    byte[] first = pack(0, 1);
    assertEquals(true, set.call(0, 1L, first));
    assertEquals(false, set.call(0, 1L, pack(0, 2)));
    assertEquals(true, set.call(0, 2L, pack(0, 2)));
    assertEquals(true, set.call(0, 1L, first));
  }
}
