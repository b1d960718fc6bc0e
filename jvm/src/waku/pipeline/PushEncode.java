package waku.pipeline;

import com.google.protobuf.ByteString;
import com.google.protobuf.CodedOutputStream;

import org.apache.spark.sql.api.java.UDF5;

import java.io.IOException;

/**
 * The filter job's encoder (the counterpart of {@link ProtoDecode} for one message):
 * {@code (IngestRecord bytes, peer_id, message_hash, protocol, request_id) -> PushRecord bytes}.
 *
 * <p>The WakuMessage is copied from the IngestRecord (field 2) byte for byte, never re-encoded,
 * so a push carries exactly what was relayed; the pubsub topic is IngestRecord field 1.
 * PushRecord (schemas/pipeline_records.proto): 1 peer_id, 2 pubsub_topic, 3 message,
 * 4 message_hash, 5 protocol, 6 request_id, 7 received_time (IngestRecord field 3, copied when
 * set). Null input, bytes that do not parse or a record
 * without message -> null (the filter job drops such rows before; this is a guard).
 */
public final class PushEncode implements UDF5<byte[], String, byte[], String, String, byte[]> {
  private static final long serialVersionUID = 1L;

  private static final int INGEST_PUBSUB_TOPIC = 1;
  private static final int INGEST_MESSAGE = 2;
  private static final int INGEST_RECEIVED_TIME = 3;

  @Override
  public byte[] call(byte[] ingest, String peerId, byte[] messageHash, String protocol, String requestId) {
    if (ingest == null || peerId == null) {
      return null;
    }
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
    int size = CodedOutputStream.computeStringSize(1, peerId);
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
    byte[] out = new byte[size];
    CodedOutputStream cos = CodedOutputStream.newInstance(out);
    try {
      cos.writeString(1, peerId);
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
      cos.checkNoSpaceLeft();
    } catch (IOException e) {
      throw new IllegalStateException("PushRecord size miscomputed", e);
    }
    return out;
  }
}
