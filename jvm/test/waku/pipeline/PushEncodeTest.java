package waku.pipeline;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static waku.pipeline.Bytes.cat;
import static waku.pipeline.Bytes.doubleField;
import static waku.pipeline.Bytes.len;
import static waku.pipeline.Bytes.of;
import static waku.pipeline.Bytes.str;
import static waku.pipeline.Bytes.tag;
import static waku.pipeline.Bytes.varintField;

import com.fasterxml.jackson.databind.JsonNode;

import java.util.Arrays;
import java.util.List;

import org.apache.spark.sql.Row;
import org.junit.jupiter.api.DynamicTest;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestFactory;

class PushEncodeTest {
  static final byte[] HASH = Bytes.hex("ab".repeat(32));
  static final byte[] MESSAGE = Bytes.hex(Vectors.named("waku_message", "minimal").get("hex").asText());

  static final int SOURCE_PARTITION = 3;  // as jvm/test/make_vectors.py
  static final long SOURCE_OFFSET = (1L << 33) + 5;

  private static byte[] encode(byte[] ingest) {
    return new PushEncode().call(ingest, "16Uiu2peer", HASH, "v2", "req-1", null, null);
  }

  private static byte[] encode(byte[] ingest, Integer partition, Long offset) {
    return new PushEncode().call(ingest, "16Uiu2peer", HASH, "v2", "req-1", partition, offset);
  }

  @TestFactory
  List<DynamicTest> makesThePushRecordPythonsProtobufMakes() {
    return Vectors.all("ingest").stream()
        .map(v -> DynamicTest.dynamicTest(v.get("name").asText(),
            () -> assertEquals(v.get("push").asText(), Bytes.hex(encode(Vectors.bytes(v, "hex"))))))
        .toList();
  }

  @TestFactory
  List<DynamicTest> withSourceCoordinatesMakesThePushRecordPythonsProtobufMakes() {
    return Vectors.all("ingest").stream()
        .map(v -> DynamicTest.dynamicTest(v.get("name").asText(),
            () -> assertEquals(v.get("push_with_source").asText(),
                Bytes.hex(encode(Vectors.bytes(v, "hex"), SOURCE_PARTITION, SOURCE_OFFSET)))))
        .toList();
  }

  @TestFactory
  List<DynamicTest> aFanoutMakesThePushRecordPythonsProtobufMakes() {
    byte[] targets = cat(PushEncode.target("16Uiu2peer", "v2", "req-1"), PushEncode.target("16Uiu2other", "", null));
    return Vectors.all("ingest").stream()
        .map(v -> DynamicTest.dynamicTest(v.get("name").asText(),
            () -> assertEquals(v.get("push_fanout").asText(), Bytes.hex(new PushFanoutEncode().call(
                Vectors.bytes(v, "hex"), targets, HASH, SOURCE_PARTITION, SOURCE_OFFSET)))))
        .toList();
  }

  @Test
  void aFanoutWithoutTargetsOrIngestIsNull() {
    byte[] ingest = cat(str(1, "/waku/2/rs/1/0"), len(2, MESSAGE));
    assertNull(new PushFanoutEncode().call(ingest, null, HASH, 0, 0L));
    assertNull(new PushFanoutEncode().call(ingest, new byte[0], HASH, 0, 0L));
    assertNull(new PushFanoutEncode().call(null, PushEncode.target("p", "v2", ""), HASH, 0, 0L));
    assertNull(new PushEncode().call(ingest, null, HASH, "v2", "", 0, 0L));
  }

  @Test
  void sourceCoordinatesAreWrittenZerosIncludedOrNotAtAll() {
    byte[] ingest = cat(str(1, "/waku/2/rs/1/0"), len(2, MESSAGE));
    byte[] plain = cat(str(1, "p"), str(2, "/waku/2/rs/1/0"), len(3, MESSAGE));
    // partition 0, offset 0: the first record of a topic, a known position (proto3 optional)
    assertArrayEquals(cat(plain, varintField(8, 0), varintField(9, 0)),
        new PushEncode().call(ingest, "p", null, null, null, 0, 0L));
    assertArrayEquals(cat(plain, varintField(8, 7), varintField(9, 1L << 40)),
        new PushEncode().call(ingest, "p", null, null, null, 7, 1L << 40));
    // unknown (nulls: a shuffled join), half given or negative: neither field
    assertArrayEquals(plain, new PushEncode().call(ingest, "p", null, null, null, null, null));
    assertArrayEquals(plain, new PushEncode().call(ingest, "p", null, null, null, 1, null));
    assertArrayEquals(plain, new PushEncode().call(ingest, "p", null, null, null, null, 5L));
    assertArrayEquals(plain, new PushEncode().call(ingest, "p", null, null, null, -1, -1L));
  }

  @Test
  void sourceCoordinatesRoundTripThroughProtoDecode() {
    JsonNode v = Vectors.named("ingest", "full");
    Row push = new ProtoDecode().call(encode(Vectors.bytes(v, "hex"), SOURCE_PARTITION, SOURCE_OFFSET),
        "waku.pipeline.v1.PushRecord");
    assertEquals(SOURCE_PARTITION, push.get(7));
    assertEquals(SOURCE_OFFSET, push.get(8));
    Row without = new ProtoDecode().call(encode(Vectors.bytes(v, "hex")), "waku.pipeline.v1.PushRecord");
    assertNull(without.get(7));
    assertNull(without.get(8));
  }

  @Test
  void roundTripThroughProtoDecode() {
    JsonNode v = Vectors.named("ingest", "full");
    Row push = new ProtoDecode().call(encode(Vectors.bytes(v, "hex")), "waku.pipeline.v1.PushRecord");
    assertEquals("16Uiu2peer", push.get(0));
    assertEquals("/waku/2/rs/1/0", push.get(1));
    Row message = (Row) push.get(2);
    assertEquals("/app/1/push/proto", message.get(1));
    assertEquals(42L, message.get(4));
    assertArrayEquals(HASH, (byte[]) push.get(3));
    assertEquals("v2", push.get(4));
    assertEquals("req-1", push.get(5));
    assertEquals(1732615200.25, push.get(6));
  }

  @Test
  void theMessageIsCopiedByteForByte() {
    JsonNode v = Vectors.named("ingest", "message_with_unknown_field");
    byte[] push = encode(Vectors.bytes(v, "hex"));
    byte[] message = Vectors.bytes(v, "message");
    WireReaderTestSupport.assertField(push, 3, message);
  }

  @Test
  void emptyOptionalArgumentsAreLeftOut() {
    byte[] ingest = cat(str(1, "/waku/2/rs/1/0"), len(2, MESSAGE));
    byte[] expected = cat(str(1, "p"), str(2, "/waku/2/rs/1/0"), len(3, MESSAGE));
    assertArrayEquals(expected, new PushEncode().call(ingest, "p", null, null, null, null, null));
    assertArrayEquals(expected, new PushEncode().call(ingest, "p", new byte[0], "", "", null, null));
  }

  @Test
  void nullInputGivesNull() {
    assertNull(new PushEncode().call(null, "p", HASH, "v2", "r", 0, 0L));
    assertNull(new PushEncode().call(cat(len(2, MESSAGE)), null, HASH, "v2", "r", 0, 0L));
  }

  @Test
  void aRecordWithoutMessageGivesNull() {
    assertNull(encode(cat(str(1, "/waku/2/rs/1/0"), doubleField(3, 1.0))));
    assertNull(encode(new byte[0]));
    assertNull(encode(cat(str(1, "/waku/2/rs/1/0"), varintField(2, 5))));  // field 2 as a varint: skipped
  }

  @Test
  void truncatedOrMalformedBytesGiveNull() {
    byte[] full = Vectors.bytes(Vectors.named("ingest", "full"), "hex");
    assertNull(encode(Arrays.copyOf(full, 20)));  // inside the message
    assertNull(encode(cat(len(2, MESSAGE), tag(3, 1), of(1, 2))));  // received_time cut
    assertNull(encode(cat(len(2, MESSAGE), tag(9, 0), of(0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF,
        0x01))));  // an oversized varint
    assertNull(encode(cat(tag(0, 2), len(2, MESSAGE))));  // field number 0
  }

  @Test
  void unknownFieldsOfTheIngestRecordAreSkipped() {
    byte[] plain = cat(str(1, "/waku/2/rs/1/0"), len(2, MESSAGE));
    byte[] extra = cat(varintField(4, 1), str(5, "bridge"), str(1, "/waku/2/rs/1/0"), varintField(99, 3),
        tag(50, 3), str(1, "inside a group"), tag(50, 4), len(2, MESSAGE), Bytes.fixed32Field(60, 7));
    assertArrayEquals(encode(plain), encode(extra));
  }

  @Test
  void anEndGroupTagEndsTheRecord() {
    byte[] ingest = cat(len(2, MESSAGE), tag(7, 4), str(1, "/never/read"));
    assertArrayEquals(cat(str(1, "16Uiu2peer"), len(3, MESSAGE), len(4, HASH), str(5, "v2"), str(6, "req-1")),
        encode(ingest));
  }
}
