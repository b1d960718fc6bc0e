package waku.pipeline;

import com.google.protobuf.ByteString;
import com.google.protobuf.CodedInputStream;
import com.google.protobuf.WireFormat;

import java.io.IOException;

/**
 * The JVM side's one reader of protobuf wire format by hand: the fields of one message in the order
 * they were written, for the records read field by field without a descriptor (
 * {@link CriteriaIndex}'s SubscriptionEvent, {@link PushEncode}'s and {@link FilterKeys}' IngestRecord). {@link ProtoDecode}
 * decodes whole messages through protobuf-java's {@code DynamicMessage} and the descriptor set
 * instead.
 *
 * <pre>
 *   WireReader r = new WireReader(bytes);
 *   while (r.next()) {
 *     if (r.is(1, WireReader.LEN)) { name = r.string(); }
 *     else { r.skip(); }
 *   }
 * </pre>
 *
 * <p>A caller reads a field only after {@link #is} has checked its number and wire type, and skips
 * every other (unknown fields, or known numbers with another wire type, are passed over as
 * protobuf's own parsers do; a later repeat of a singular field wins). The message ends at the
 * end of the bytes or at an end-group tag. Truncated bytes, an invalid tag, a varint longer than
 * ten bytes or a string that is not UTF-8 throw {@link IOException} (protobuf-java's
 * {@code InvalidProtocolBufferException}).
 */
final class WireReader {
  /** Wire type of a varint (int32, int64, uint*, sint*, bool, enum). */
  static final int VARINT = WireFormat.WIRETYPE_VARINT;
  /** Wire type of a fixed 64-bit value (fixed64, sfixed64, double). */
  static final int FIXED64 = WireFormat.WIRETYPE_FIXED64;
  /** Wire type of a length-delimited value (string, bytes, message, packed repeated). */
  static final int LEN = WireFormat.WIRETYPE_LENGTH_DELIMITED;
  /** Wire type of a fixed 32-bit value (fixed32, sfixed32, float). */
  static final int FIXED32 = WireFormat.WIRETYPE_FIXED32;

  private final CodedInputStream in;
  private int tag;

  WireReader(byte[] bytes) {
    this.in = CodedInputStream.newInstance(bytes);
  }

  /** Reads the bytes of a {@link ByteString} where they are (no copy to an array first). */
  WireReader(ByteString bytes) {
    this.in = bytes.newCodedInput();
  }

  /** Moves to the next field; false at the end of the message. */
  boolean next() throws IOException {
    tag = in.readTag();
    return tag != 0 && WireFormat.getTagWireType(tag) != WireFormat.WIRETYPE_END_GROUP;
  }

  /** The current field's number. */
  int field() {
    return WireFormat.getTagFieldNumber(tag);
  }

  /** The current field's wire type. */
  int wireType() {
    return WireFormat.getTagWireType(tag);
  }

  /** Whether the current field has this number and wire type. */
  boolean is(int field, int wireType) {
    return tag == ((field << 3) | wireType);
  }

  /** Passes over the current field's value (a group with everything in it). */
  void skip() throws IOException {
    in.skipField(tag);
  }

  /** The current field's value as a UTF-8 string (wire type {@link #LEN}). */
  String string() throws IOException {
    return in.readStringRequireUtf8();
  }

  /** The current field's value as bytes (wire type {@link #LEN}), sharing no array with the input. */
  ByteString bytes() throws IOException {
    return in.readBytes();
  }

  /** The current field's value as a double (wire type {@link #FIXED64}). */
  double doubleValue() throws IOException {
    return in.readDouble();
  }

  /** The current field's value as a sint64 (wire type {@link #VARINT}, zigzag). */
  long sint64Value() throws IOException {
    return in.readSInt64();
  }

  /** The current field's value as an enum number (wire type {@link #VARINT}). */
  int enumValue() throws IOException {
    return in.readEnum();
  }
}
