package waku.pipeline;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static waku.pipeline.Bytes.cat;
import static waku.pipeline.Bytes.doubleField;
import static waku.pipeline.Bytes.fixed32Field;
import static waku.pipeline.Bytes.len;
import static waku.pipeline.Bytes.of;
import static waku.pipeline.Bytes.str;
import static waku.pipeline.Bytes.tag;
import static waku.pipeline.Bytes.varint;
import static waku.pipeline.Bytes.varintField;

import com.google.protobuf.ByteString;

import java.io.IOException;
import java.util.ArrayList;
import java.util.List;

import org.junit.jupiter.api.Test;

class WireReaderTest {

  /** The numbers of the fields a reader visits when it skips every one. */
  private static List<Integer> fieldsSkipped(byte[] bytes) throws IOException {
    WireReader r = new WireReader(bytes);
    List<Integer> out = new ArrayList<>();
    while (r.next()) {
      out.add(r.field());
      r.skip();
    }
    return out;
  }

  @Test
  void readsFieldsInTheOrderWritten() throws IOException {
    byte[] bytes = cat(str(1, "peer"), varintField(3, 6), doubleField(6, 1.5), len(4, of(0, 1, 2)), str(5, "a"),
        str(5, "b"));
    WireReader r = new WireReader(bytes);
    assertTrue(r.next());
    assertTrue(r.is(1, WireReader.LEN));
    assertEquals("peer", r.string());
    assertTrue(r.next());
    assertEquals(3, r.field());
    assertEquals(WireReader.VARINT, r.wireType());
    assertEquals(6, r.enumValue());
    assertTrue(r.next());
    assertTrue(r.is(6, WireReader.FIXED64));
    assertEquals(1.5, r.doubleValue());
    assertTrue(r.next());
    assertTrue(r.is(4, WireReader.LEN));
    assertEquals(ByteString.copyFrom(of(0, 1, 2)), r.bytes());
    assertTrue(r.next());
    assertEquals("a", r.string());
    assertTrue(r.next());
    assertEquals("b", r.string());
    assertFalse(r.next());
    assertFalse(r.next());
  }

  @Test
  void emptyBytesAreAMessageWithoutFields() throws IOException {
    assertFalse(new WireReader(new byte[0]).next());
  }

  @Test
  void isChecksTheWireTypeToo() throws IOException {
    WireReader r = new WireReader(varintField(1, 7));
    assertTrue(r.next());
    assertFalse(r.is(1, WireReader.LEN));
    assertFalse(r.is(2, WireReader.VARINT));
    assertTrue(r.is(1, WireReader.VARINT));
  }

  @Test
  void skipsEveryWireTypeAndGroupsWithTheirContents() throws IOException {
    byte[] group = cat(tag(9, 3), varintField(1, 5), tag(9, 3), str(2, "inner"), tag(9, 4), tag(9, 4));
    byte[] bytes = cat(varintField(1, 300), doubleField(2, 2.0), str(3, "x"), fixed32Field(4, -1), group,
        str(7, "after"));
    assertEquals(List.of(1, 2, 3, 4, 9, 7), fieldsSkipped(bytes));
  }

  @Test
  void anEndGroupTagEndsTheMessage() throws IOException {
    assertEquals(List.of(1), fieldsSkipped(cat(str(1, "a"), tag(1, 4), str(2, "never read"))));
  }

  @Test
  void aLaterCopyOfAFieldIsReadAfterTheEarlier() throws IOException {
    WireReader r = new WireReader(cat(str(1, "first"), str(1, "second")));
    String last = null;
    while (r.next()) {
      last = r.string();
    }
    assertEquals("second", last);
  }

  @Test
  void truncatedValuesThrow() throws IOException {
    WireReader lenShort = new WireReader(cat(tag(1, 2), varint(5), of('a', 'b')));
    assertTrue(lenShort.next());
    assertThrows(IOException.class, lenShort::string);

    WireReader lenShortSkipped = new WireReader(cat(tag(1, 2), varint(5), of('a', 'b')));
    assertTrue(lenShortSkipped.next());
    assertThrows(IOException.class, lenShortSkipped::skip);

    WireReader varintCut = new WireReader(cat(tag(3, 0), of(0x80)));
    assertTrue(varintCut.next());
    assertThrows(IOException.class, varintCut::enumValue);

    WireReader fixedCut = new WireReader(cat(tag(6, 1), of(1, 2, 3)));
    assertTrue(fixedCut.next());
    assertThrows(IOException.class, fixedCut::doubleValue);

    assertThrows(IOException.class, () -> new WireReader(of(0x80)).next());  // a tag cut in its varint
  }

  @Test
  void aVarintLongerThanTenBytesThrows() throws IOException {
    byte[] eleven = of(0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x01);
    WireReader value = new WireReader(cat(tag(3, 0), eleven));
    assertTrue(value.next());
    assertThrows(IOException.class, value::enumValue);

    WireReader skipped = new WireReader(cat(tag(3, 0), eleven));
    assertTrue(skipped.next());
    assertThrows(IOException.class, skipped::skip);

    assertThrows(IOException.class, () -> new WireReader(eleven).next());  // as a tag
  }

  @Test
  void aNegativeOrOversizedLengthThrows() throws IOException {
    WireReader negative = new WireReader(cat(tag(1, 2), varint(0xFFFFFFFFL), of('a')));
    assertTrue(negative.next());
    assertThrows(IOException.class, negative::bytes);

    WireReader oversized = new WireReader(cat(tag(1, 2), varint(Integer.MAX_VALUE), of('a')));
    assertTrue(oversized.next());
    assertThrows(IOException.class, oversized::bytes);
  }

  @Test
  void fieldNumberZeroAndWireTypesSixAndSevenThrow() {
    assertThrows(IOException.class, () -> new WireReader(cat(tag(0, 2), varint(0))).next());
    WireReader six = new WireReader(cat(tag(1, 6), varint(0)));
    assertThrows(IOException.class, () -> {
      while (six.next()) {
        six.skip();
      }
    });
  }

  @Test
  void aStringMustBeUtf8ButBytesNeedNot() throws IOException {
    byte[] bad = len(1, of(0xC3, 0x28));
    WireReader asString = new WireReader(bad);
    assertTrue(asString.next());
    assertThrows(IOException.class, asString::string);

    WireReader asBytes = new WireReader(bad);
    assertTrue(asBytes.next());
    assertArrayEquals(of(0xC3, 0x28), asBytes.bytes().toByteArray());
  }

  @Test
  void bytesShareNoArrayWithTheInput() throws IOException {
    byte[] input = len(1, of(1, 2, 3));
    WireReader r = new WireReader(input);
    assertTrue(r.next());
    ByteString value = r.bytes();
    input[2] = 9;
    assertArrayEquals(of(1, 2, 3), value.toByteArray());
  }
}
