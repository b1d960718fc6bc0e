package waku.pipeline;

import com.google.protobuf.ByteString;
import com.google.protobuf.CodedOutputStream;

import org.apache.spark.sql.api.java.UDF7;

import java.io.IOException;

/**
 * The filter job's encoder (the counterpart of {@link ProtoDecode} for one message):
 * {@code (IngestRecord bytes, peer_id, message_hash, protocol, request_id, source_partition,
 * source_offset) -> PushRecord bytes}.
 *
 * <p>The WakuMessage is copied from the IngestRecord (field 2) byte for byte, never re-encoded,
 * so a push carries exactly what was relayed; the pubsub topic is IngestRecord field 1.
 * PushRecord (schemas/pipeline_records.proto): 1 peer_id, 2 pubsub_topic, 3 message,
 * 4 message_hash, 5 protocol, 6 request_id, 7 received_time (IngestRecord field 3, copied when
 * set), 8 source_partition and 9 source_offset (the IngestRecord's Kafka coordinates in
 * waku.messages; written, zeros included, when both are given and not negative, else both left
 * out: the filter job passes nulls where its plan does not keep a source partition's order, see
 * pipeline/filter/matching.py), 10 targets (a fan-out's subscribers: {@link PushFanoutEncode}
 * passes them already encoded, {@link CriteriaIndex}'s bytes of each subscriber). Null input,
 * bytes that do not parse or a record without message -> null (the filter job drops such rows
 * before; this is a guard).
 */
public final class PushEncode
    implements UDF7<byte[], String, byte[], String, String, Integer, Long, byte[]> {
  private static final long serialVersionUID = 1L;

  private static final int INGEST_PUBSUB_TOPIC = 1;
  private static final int INGEST_MESSAGE = 2;
  private static final int INGEST_RECEIVED_TIME = 3;

  @Override
  public byte[] call(byte[] ingest, String peerId, byte[] messageHash, String protocol, String requestId,
      Integer sourcePartition, Long sourceOffset) {
    if (peerId == null) {
      return null;
    }
    return encode(ingest, peerId, messageHash, protocol, requestId, null, sourcePartition, sourceOffset);
  }

  /**
   * The PushRecord of one subscriber ({@code peerId}, {@code protocol}, {@code requestId}) or of
   * a fan-out ({@code targets}: PushRecord field 10 entries, already encoded, written as they
   * are; {@code peerId} null).
   */
  static byte[] encode(byte[] ingest, String peerId, byte[] messageHash, String protocol, String requestId,
      byte[] targets, Integer sourcePartition, Long sourceOffset) {
    if (ingest == null) {
      return null;
    }
    boolean source = sourcePartition != null && sourceOffset != null && sourcePartition >= 0 && sourceOffset >= 0;
    ByteString topic = ByteString.EMPTY;
    ByteString message = null;
    double receivedTime = 0.0;
    try {
      WireReader in = new WireReader(ingest);
      while (in.next()) {
        if (in.is(INGEST_PUBSUB_TOPIC, WireReader.LEN)) {
          topic = in.bytes();
        } else if (in.is(INGEST_MESSAGE, WireReader.LEN)) {
          message = in.bytes();
        } else if (in.is(INGEST_RECEIVED_TIME, WireReader.FIXED64)) {
          receivedTime = in.doubleValue();
        } else {
          in.skip();
        }
      }
    } catch (IOException e) {
      return null;
    }
    if (message == null) {
      return null;
    }
    int size = peerId == null ? 0 : CodedOutputStream.computeStringSize(1, peerId);
    if (!topic.isEmpty()) {
      size += CodedOutputStream.computeBytesSize(2, topic);
    }
    size += CodedOutputStream.computeBytesSize(3, message);
    if (messageHash != null && messageHash.length > 0) {
      size += CodedOutputStream.computeByteArraySize(4, messageHash);
    }
    if (protocol != null && !protocol.isEmpty()) {
      size += CodedOutputStream.computeStringSize(5, protocol);
    }
    if (requestId != null && !requestId.isEmpty()) {
      size += CodedOutputStream.computeStringSize(6, requestId);
    }
    if (receivedTime != 0.0) {
      size += CodedOutputStream.computeDoubleSize(7, receivedTime);
    }
    if (source) {
      size += CodedOutputStream.computeInt32Size(8, sourcePartition)
          + CodedOutputStream.computeInt64Size(9, sourceOffset);
    }
    if (targets != null) {
      size += targets.length;
    }
    byte[] out = new byte[size];
    CodedOutputStream cos = CodedOutputStream.newInstance(out);
    try {
      if (peerId != null) {
        cos.writeString(1, peerId);
      }
      if (!topic.isEmpty()) {
        cos.writeBytes(2, topic);
      }
      cos.writeBytes(3, message);
      if (messageHash != null && messageHash.length > 0) {
        cos.writeByteArray(4, messageHash);
      }
      if (protocol != null && !protocol.isEmpty()) {
        cos.writeString(5, protocol);
      }
      if (requestId != null && !requestId.isEmpty()) {
        cos.writeString(6, requestId);
      }
      if (receivedTime != 0.0) {
        cos.writeDouble(7, receivedTime);
      }
      if (source) {
        cos.writeInt32(8, sourcePartition);
        cos.writeInt64(9, sourceOffset);
      }
      if (targets != null) {
        cos.writeRawBytes(targets);
      }
      cos.checkNoSpaceLeft();
    } catch (IOException e) {
      throw new IllegalStateException("PushRecord size miscomputed", e);
    }
    return out;
  }

  /**
   * One subscriber as a PushRecord field 10 entry (a PushTarget: 1 peer_id, 2 protocol,
   * 3 request_id, each left out when empty, as Python's protobuf writes them).
   */
  static byte[] target(String peerId, String protocol, String requestId) {
    int inner = 0;
    if (peerId != null && !peerId.isEmpty()) {
      inner += CodedOutputStream.computeStringSize(1, peerId);
    }
    if (protocol != null && !protocol.isEmpty()) {
      inner += CodedOutputStream.computeStringSize(2, protocol);
    }
    if (requestId != null && !requestId.isEmpty()) {
      inner += CodedOutputStream.computeStringSize(3, requestId);
    }
    byte[] out = new byte[CodedOutputStream.computeTagSize(10) + CodedOutputStream.computeUInt32SizeNoTag(inner) + inner];
    CodedOutputStream cos = CodedOutputStream.newInstance(out);
    try {
      cos.writeTag(10, com.google.protobuf.WireFormat.WIRETYPE_LENGTH_DELIMITED);
      cos.writeUInt32NoTag(inner);
      if (peerId != null && !peerId.isEmpty()) {
        cos.writeString(1, peerId);
      }
      if (protocol != null && !protocol.isEmpty()) {
        cos.writeString(2, protocol);
      }
      if (requestId != null && !requestId.isEmpty()) {
        cos.writeString(3, requestId);
      }
      cos.checkNoSpaceLeft();
    } catch (IOException e) {
      throw new IllegalStateException("PushTarget size miscomputed", e);
    }
    return out;
  }
}
