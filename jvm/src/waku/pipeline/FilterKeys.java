package waku.pipeline;

import com.google.protobuf.ByteString;

import org.apache.spark.sql.Row;
import org.apache.spark.sql.RowFactory;
import org.apache.spark.sql.api.java.UDF1;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;
import java.util.List;

/**
 * The filter job's decoder: {@code IngestRecord bytes -> array<struct<pubsub_topic, content_topic,
 * message_hash>>} of one element or none (an array, so that {@code explode} evaluates it once a
 * row where a filter on a struct would evaluate it again), the three things matching needs, read with {@link WireReader} instead of
 * decoding every field through {@link ProtoDecode}'s {@code DynamicMessage}. The message hash is
 * 14/WAKU2-MESSAGE's, as {@code pipeline/spark/columns.message_hash_col} computes it for the
 * store: SHA-256 of pubsub topic, payload, content topic, meta and the timestamp as 8 big-endian
 * bytes (field 10; else the legacy seconds of field 4 times 1e9 when they fit a long; else 0).
 *
 * <p>Empty when the bytes are not an IngestRecord (as {@link ProtoDecode} would make them: a
 * string field that is not UTF-8 included), when the record has no message or when its content
 * topic is empty: the rows the filter job drops. Repeats of the message field are merged, as
 * protobuf does (their bytes read as one message).
 */
public final class FilterKeys implements UDF1<byte[], List<Row>> {
  private static final long serialVersionUID = 1L;

  private static final int INGEST_PUBSUB_TOPIC = 1;
  private static final int INGEST_MESSAGE = 2;
  private static final int INGEST_BRIDGE_ID = 5;
  private static final int PAYLOAD = 1;
  private static final int CONTENT_TOPIC = 2;
  private static final int LEGACY_TIMESTAMP = 4;
  private static final int TIMESTAMP = 10;
  private static final int META = 11;

  private static final ThreadLocal<MessageDigest> SHA256 = ThreadLocal.withInitial(() -> {
    try {
      return MessageDigest.getInstance("SHA-256");
    } catch (NoSuchAlgorithmException e) {
      throw new IllegalStateException(e);
    }
  });

  @Override
  public List<Row> call(byte[] ingest) {
    if (ingest == null) {
      return List.of();
    }
    try {
      String pubsubTopic = "";
      ByteString message = null;
      WireReader in = new WireReader(ingest);
      while (in.next()) {
        if (in.is(INGEST_PUBSUB_TOPIC, WireReader.LEN)) {
          pubsubTopic = in.string();
        } else if (in.is(INGEST_MESSAGE, WireReader.LEN)) {
          message = message == null ? in.bytes() : message.concat(in.bytes());
        } else if (in.is(INGEST_BRIDGE_ID, WireReader.LEN)) {
          in.string();  // not needed, but a record whose string is not UTF-8 is no IngestRecord
        } else {
          in.skip();
        }
      }
      Row keys = message == null ? null : keys(pubsubTopic, message);
      return keys == null ? List.of() : List.of(keys);
    } catch (IOException e) {
      return List.of();
    }
  }

  private static Row keys(String pubsubTopic, ByteString message) throws IOException {
    ByteString payload = ByteString.EMPTY;
    String contentTopic = "";
    ByteString meta = ByteString.EMPTY;
    Long timestamp = null;
    Double legacy = null;
    WireReader in = new WireReader(message);
    while (in.next()) {
      if (in.is(PAYLOAD, WireReader.LEN)) {
        payload = in.bytes();
      } else if (in.is(CONTENT_TOPIC, WireReader.LEN)) {
        contentTopic = in.string();
      } else if (in.is(TIMESTAMP, WireReader.VARINT)) {
        timestamp = in.sint64Value();
      } else if (in.is(LEGACY_TIMESTAMP, WireReader.FIXED64)) {
        legacy = in.doubleValue();
      } else if (in.is(META, WireReader.LEN)) {
        meta = in.bytes();
      } else {
        in.skip();
      }
    }
    if (contentTopic.isEmpty()) {
      return null;
    }
    long ts = timestamp != null ? timestamp : legacy != null ? legacyNanos(legacy) : 0L;
    MessageDigest sha = SHA256.get();
    sha.reset();
    sha.update(pubsubTopic.getBytes(StandardCharsets.UTF_8));
    update(sha, payload);
    sha.update(contentTopic.getBytes(StandardCharsets.UTF_8));
    update(sha, meta);
    for (int shift = 56; shift >= 0; shift -= 8) {
      sha.update((byte) (ts >>> shift));
    }
    return RowFactory.create(pubsubTopic, contentTopic, sha.digest());
  }

  /** Hashes a ByteString's buffers one by one, without building one array of them (the digest
   *  copies a read-only buffer through a small array of its own, reused from call to call). */
  private static void update(MessageDigest sha, ByteString bytes) {
    for (ByteBuffer part : bytes.asReadOnlyByteBufferList()) {
      sha.update(part);
    }
  }

  /** Spark's try_cast(seconds * 1e9 AS BIGINT) (the store's decoding): truncated, 0 when it does
   *  not fit (NaN and the infinities included), which the hash writes for a missing timestamp. */
  static long legacyNanos(double seconds) {
    double x = seconds * 1e9;
    if (Math.floor(x) <= Long.MAX_VALUE && Math.ceil(x) >= Long.MIN_VALUE) {
      return (long) x;
    }
    return 0L;
  }
}
