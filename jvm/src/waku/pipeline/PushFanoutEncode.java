package waku.pipeline;

import org.apache.spark.sql.api.java.UDF5;

/**
 * The filter job's fan-out encoder: {@code (IngestRecord bytes, targets, message_hash,
 * source_partition, source_offset) -> PushRecord bytes} of one message for every subscriber at
 * one bridge. {@code targets} are PushRecord field 10 entries as {@link CriteriaFanout} gives
 * them; the rest is {@link PushEncode}'s (the WakuMessage copied byte for byte). No targets, null
 * input or bytes that do not parse -> null.
 */
public final class PushFanoutEncode implements UDF5<byte[], byte[], byte[], Integer, Long, byte[]> {
  private static final long serialVersionUID = 1L;

  @Override
  public byte[] call(byte[] ingest, byte[] targets, byte[] messageHash, Integer sourcePartition, Long sourceOffset) {
    if (targets == null || targets.length == 0) {
      return null;
    }
    return PushEncode.encode(ingest, null, messageHash, null, null, targets, sourcePartition, sourceOffset);
  }
}
