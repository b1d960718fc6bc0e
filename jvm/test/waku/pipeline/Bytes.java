package waku.pipeline;

import java.io.ByteArrayOutputStream;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.charset.StandardCharsets;
import java.util.HexFormat;

/** Protobuf wire format written by hand, for the tests' edge cases (the real encodings are in vectors.json). */
final class Bytes {
  private Bytes() {
  }

  static byte[] hex(String h) {
    return HexFormat.of().parseHex(h);
  }

  static String hex(byte[] b) {
    return HexFormat.of().formatHex(b);
  }

  static byte[] cat(byte[]... parts) {
    ByteArrayOutputStream out = new ByteArrayOutputStream();
    for (byte[] p : parts) {
      out.writeBytes(p);
    }
    return out.toByteArray();
  }

  static byte[] of(int... values) {
    byte[] out = new byte[values.length];
    for (int i = 0; i < values.length; i++) {
      out[i] = (byte) values[i];
    }
    return out;
  }

  static byte[] varint(long v) {
    ByteArrayOutputStream out = new ByteArrayOutputStream();
    while ((v & ~0x7FL) != 0) {
      out.write((int) ((v & 0x7F) | 0x80));
      v >>>= 7;
    }
    out.write((int) v);
    return out.toByteArray();
  }

  static byte[] tag(int field, int wireType) {
    return varint(((long) field << 3) | wireType);
  }

  static byte[] len(int field, byte[] value) {
    return cat(tag(field, 2), varint(value.length), value);
  }

  static byte[] str(int field, String s) {
    return len(field, s.getBytes(StandardCharsets.UTF_8));
  }

  static byte[] varintField(int field, long v) {
    return cat(tag(field, 0), varint(v));
  }

  static byte[] doubleField(int field, double d) {
    return cat(tag(field, 1), ByteBuffer.allocate(8).order(ByteOrder.LITTLE_ENDIAN).putDouble(d).array());
  }

  static byte[] fixed32Field(int field, int v) {
    return cat(tag(field, 5), ByteBuffer.allocate(4).order(ByteOrder.LITTLE_ENDIAN).putInt(v).array());
  }
}
