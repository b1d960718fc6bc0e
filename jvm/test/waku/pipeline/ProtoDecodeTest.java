package waku.pipeline;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertDoesNotThrow;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static waku.pipeline.Bytes.cat;
import static waku.pipeline.Bytes.len;
import static waku.pipeline.Bytes.of;
import static waku.pipeline.Bytes.str;
import static waku.pipeline.Bytes.tag;
import static waku.pipeline.Bytes.varintField;

import com.fasterxml.jackson.databind.JsonNode;

import java.nio.charset.StandardCharsets;
import java.util.Arrays;
import java.util.List;

import org.apache.spark.sql.Row;
import org.junit.jupiter.api.DynamicTest;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestFactory;

class ProtoDecodeTest {
  static final String WAKU_MESSAGE = "waku.message.v1.WakuMessage";
  /** WakuMessage's fields in declaration order, the order of ProtoDecode's Row. */
  static final String[] FIELDS = {
    "payload", "content_topic", "version", "legacy_timestamp", "timestamp", "meta", "rate_limit_proof", "ephemeral"
  };

  private static Row decode(byte[] bytes) {
    return new ProtoDecode().call(bytes, WAKU_MESSAGE);
  }

  /** Checks a decoded WakuMessage against the values Python's protobuf gave (vectors.json). */
  static void assertMessage(JsonNode expected, Row row) {
    assertNotNull(row);
    assertEquals(FIELDS.length, row.size());
    for (int i = 0; i < FIELDS.length; i++) {
      JsonNode want = expected.get(FIELDS[i]);
      Object got = row.get(i);
      String what = FIELDS[i];
      if (want.isNull()) {
        assertNull(got, what);
      } else if (what.equals("payload") || what.equals("meta") || what.equals("rate_limit_proof")) {
        assertArrayEquals(Bytes.hex(want.asText()), (byte[]) got, what);
      } else if (what.equals("content_topic")) {
        assertEquals(want.asText(), got, what);
      } else if (what.equals("version") || what.equals("timestamp")) {
        assertEquals(want.asLong(), got, what);  // uint32 comes out as a long, never negative
      } else if (what.equals("legacy_timestamp")) {
        assertEquals(want.asDouble(), got, what);
      } else {
        assertEquals(want.asBoolean(), got, what);
      }
    }
  }

  @TestFactory
  List<DynamicTest> decodesWhatPythonsProtobufEncoded() {
    return Vectors.all("waku_message").stream()
        .map(v -> DynamicTest.dynamicTest(v.get("name").asText(),
            () -> assertMessage(v.get("fields"), decode(Vectors.bytes(v, "hex")))))
        .toList();
  }

  @Test
  void nullBytesGiveNull() {
    assertNull(decode(null));
  }

  @Test
  void anUnknownOrNullMessageNameIsRefused() {
    assertThrows(IllegalArgumentException.class, () -> new ProtoDecode().call(new byte[0], "no.such.Message"));
    assertThrows(IllegalArgumentException.class, () -> new ProtoDecode().call(new byte[0], null));
  }

  @Test
  void theDecoderOfANameIsBuiltOnce() {
    assertSame(ProtoDecode.decoderFor(WAKU_MESSAGE), ProtoDecode.decoderFor(WAKU_MESSAGE));
  }

  @Test
  void truncatedBytesGiveNullAndNoPrefixThrows() {
    byte[] full = Vectors.bytes(Vectors.named("waku_message", "every_field"), "hex");
    assertNull(decode(Arrays.copyOf(full, 100)));  // inside the payload
    assertNull(decode(Arrays.copyOf(full, full.length - 1)));  // the ephemeral flag's value cut
    for (int n = 0; n < full.length; n++) {
      byte[] prefix = Arrays.copyOf(full, n);
      assertDoesNotThrow(() -> decode(prefix));
    }
  }

  @Test
  void garbageGivesNull() {
    assertNull(decode(of(0xFF, 0xFF, 0xFF)));
    assertNull(decode(cat(tag(0, 2), of(0))));  // field number 0
    assertNull(decode(cat(tag(3, 6), of(0))));  // wire type 6
  }

  @Test
  void anOversizedVarintGivesNull() {
    assertNull(decode(cat(tag(3, 0), of(0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x01))));
  }

  @Test
  void unknownFieldsAreIgnored() {
    Row row = decode(cat(str(2, "/t/1/a/b"), varintField(99, 1), len(100, of(1, 2)), tag(101, 3), tag(101, 4)));
    assertEquals("/t/1/a/b", row.get(1));
  }

  @Test
  void aKnownFieldWithAnotherWireTypeIsSkippedAsUnknown() {
    Row row = decode(cat(varintField(2, 5), varintField(1, 7), str(3, "x")));
    assertNotNull(row);
    assertEquals("", row.get(1));
    assertArrayEquals(new byte[0], (byte[]) row.get(0));
    assertNull(row.get(2));
  }

  @Test
  void aStringThatIsNotUtf8GivesNull() {
    assertNull(decode(len(2, of(0xC3, 0x28))));
  }

  @Test
  void nestedMessagesEnumsAndRepeatedFields() {
    JsonNode ingest = Vectors.named("ingest", "full");
    Row row = new ProtoDecode().call(Vectors.bytes(ingest, "hex"), "waku.pipeline.v1.IngestRecord");
    assertEquals("/waku/2/rs/1/0", row.get(0));
    Row message = (Row) row.get(1);
    assertArrayEquals("push me".getBytes(StandardCharsets.UTF_8), (byte[]) message.get(0));
    assertEquals(42L, message.get(4));
    assertEquals(1732615200.25, row.get(2));
    assertEquals("RELAY", row.get(3));
    assertEquals("b1", row.get(4));

    byte[] event = Vectors.bytes(Vectors.named("subscription_event", "subscribe"), "hex");
    Row e = new ProtoDecode().call(event, "waku.pipeline.v1.SubscriptionEvent");
    assertEquals("SUBSCRIBE", e.get(2));
    assertEquals(List.of("/a/1/x/proto", "/a/1/y/proto"), e.get(4));

    Row none = new ProtoDecode().call(new byte[0], "waku.pipeline.v1.IngestRecord");
    assertNull(none.get(1));  // a message field that is absent
    assertEquals("SOURCE_UNSPECIFIED", none.get(3));
    assertEquals(List.of(), new ProtoDecode().call(new byte[0], "waku.pipeline.v1.SubscriptionEvent").get(4));
  }
}
