package waku.pipeline;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.io.UncheckedIOException;

/** Assertions on encoded records, read with the reader under test elsewhere (WireReaderTest). */
final class WireReaderTestSupport {
  private WireReaderTestSupport() {
  }

  /** Asserts that `record` holds length-delimited field `field` with exactly `value`. */
  static void assertField(byte[] record, int field, byte[] value) {
    try {
      WireReader r = new WireReader(record);
      boolean found = false;
      while (r.next()) {
        if (r.is(field, WireReader.LEN)) {
          assertArrayEquals(value, r.bytes().toByteArray());
          found = true;
        } else {
          r.skip();
        }
      }
      assertTrue(found, "field " + field + " absent");
    } catch (IOException e) {
      throw new UncheckedIOException(e);
    }
  }
}
