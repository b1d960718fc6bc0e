package waku.pipeline;

import org.apache.spark.sql.api.java.UDF3;

import java.nio.ByteBuffer;
import java.util.Arrays;
import java.util.HashMap;
import java.util.Map;

/**
 * {@code (kafka partition, kafka offset, packed set) -> whether the pair is in the set}: the store
 * job picks a batch's rows to write by their Kafka coordinates with one binary literal, instead of
 * an IN list with a literal per offset. A batch of 250,000 records has ~12,500 copies; as an IN
 * list they took ~1 s of the driver's CPU a batch to parse, analyse and plan
 * (pipeline/store/writer.py, docs/decisions.md session 22).
 *
 * <p>The set is packed by {@code pipeline.store.writer.pack_coordinates}: 12 bytes a pair, a
 * big-endian int32 partition then a big-endian int64 offset, in any order. A null partition or
 * offset gives null (as {@code IN} does); a null set is empty. A set whose length is not a
 * multiple of 12 is refused with {@link IllegalArgumentException}.
 *
 * <p>The literal is the same array for every row of a task, so the set is unpacked once: the last
 * unpacked set is kept with the array it came from (another array, even an equal one, is unpacked
 * anew).
 */
public final class CoordinateSet implements UDF3<Integer, Long, byte[], Boolean> {
  private static final long serialVersionUID = 1L;

  /** Bytes a packed (partition, offset) pair takes. */
  public static final int PAIR_BYTES = 12;

  private static final class Unpacked {
    final byte[] packed;
    final Map<Integer, long[]> offsets; // sorted, per partition

    Unpacked(byte[] packed) {
      if (packed.length % PAIR_BYTES != 0) {
        throw new IllegalArgumentException(
            "CoordinateSet: a packed set is 12 bytes a pair, got " + packed.length + " bytes");
      }
      Map<Integer, Integer> counts = new HashMap<>();
      ByteBuffer in = ByteBuffer.wrap(packed);
      int pairs = packed.length / PAIR_BYTES;
      for (int i = 0; i < pairs; i++) {
        counts.merge(in.getInt(i * PAIR_BYTES), 1, Integer::sum);
      }
      Map<Integer, long[]> out = new HashMap<>();
      Map<Integer, Integer> filled = new HashMap<>();
      for (Map.Entry<Integer, Integer> e : counts.entrySet()) {
        out.put(e.getKey(), new long[e.getValue()]);
        filled.put(e.getKey(), 0);
      }
      for (int i = 0; i < pairs; i++) {
        int partition = in.getInt(i * PAIR_BYTES);
        int at = filled.merge(partition, 1, Integer::sum) - 1;
        out.get(partition)[at] = in.getLong(i * PAIR_BYTES + 4);
      }
      for (long[] offsets : out.values()) {
        Arrays.sort(offsets);
      }
      this.packed = packed;
      this.offsets = out;
    }

    boolean contains(int partition, long offset) {
      long[] sorted = offsets.get(partition);
      return sorted != null && Arrays.binarySearch(sorted, offset) >= 0;
    }
  }

  private transient volatile Unpacked last;

  @Override
  public Boolean call(Integer partition, Long offset, byte[] packed) {
    if (partition == null || offset == null) {
      return null;
    }
    if (packed == null) {
      return Boolean.FALSE;
    }
    Unpacked set = last;
    if (set == null || set.packed != packed) {
      set = new Unpacked(packed);
      last = set;
    }
    return set.contains(partition, offset);
  }
}
