package waku.pipeline;

import com.google.protobuf.ByteString;
import com.google.protobuf.DescriptorProtos.FileDescriptorProto;
import com.google.protobuf.DescriptorProtos.FileDescriptorSet;
import com.google.protobuf.Descriptors.Descriptor;
import com.google.protobuf.Descriptors.DescriptorValidationException;
import com.google.protobuf.Descriptors.EnumValueDescriptor;
import com.google.protobuf.Descriptors.FieldDescriptor;
import com.google.protobuf.Descriptors.FileDescriptor;
import com.google.protobuf.DynamicMessage;
import com.google.protobuf.ExtensionRegistry;
import com.google.protobuf.InvalidProtocolBufferException;
import com.google.protobuf.Parser;

import org.apache.spark.sql.Row;
import org.apache.spark.sql.RowFactory;
import org.apache.spark.sql.api.java.UDF2;

import java.io.IOException;
import java.io.InputStream;
import java.util.ArrayList;
import java.util.Collections;
import java.util.HashMap;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;

/**
 * Stand-in for Spark's {@code from_protobuf} (the spark-protobuf jar is not reachable from our
 * Maven mirror): {@code (bytes, fully qualified message name) -> Row}.
 *
 * <p>The descriptor set is loaded once per JVM from the classpath resource {@code /waku.desc}
 * (jvm/build.sh copies schemas/waku.desc into the jar). The Spark type of the result is built on
 * the Python side by {@code pipeline.protobuf.spark_schema}, which must use the same mapping:
 *
 * <ul>
 *   <li>string → StringType; bytes → BinaryType; bool → BooleanType
 *   <li>int32, sint32, sfixed32 → IntegerType
 *   <li>uint32, fixed32 → LongType (unsigned value, never negative)
 *   <li>int64, sint64, sfixed64 → LongType
 *   <li>uint64, fixed64 → LongType, two's complement: values ≥ 2^63 come out negative (same as
 *       from_protobuf without {@code upcast.unsigned.ints})
 *   <li>double → DoubleType; float → FloatType
 *   <li>enum → StringType, the value's name (a proto3 number with no name comes out as the
 *       protobuf-java placeholder name {@code UNKNOWN_ENUM_VALUE_<Enum>_<number>})
 *   <li>message → struct (recursively; recursive message types are rejected)
 *   <li>map → MapType; other repeated → ArrayType (absent → empty array)
 * </ul>
 *
 * <p>Fields with presence (proto3 {@code optional}, proto2 optional, message fields, oneof
 * members) that are absent → null. Proto3 implicit-presence fields that are absent → their default
 * (like from_protobuf with {@code emit.default.values=true}). Bytes that do not parse → null
 * (PERMISSIVE mode; the caller quarantines null rows). Null input → null. An unknown message name
 * → {@link IllegalArgumentException}.
 */
public final class ProtoDecode implements UDF2<byte[], String, Row> {
  private static final long serialVersionUID = 1L;

  /** Classpath resource holding the FileDescriptorSet. */
  public static final String DESCRIPTOR_RESOURCE = "/waku.desc";

  /** The decoder used for the previous row; almost every call repeats the same message name. */
  private transient volatile MessageDecoder last;

  @Override
  public Row call(byte[] bytes, String messageName) {
    MessageDecoder decoder = last;
    if (decoder == null || !decoder.name.equals(messageName)) {
      decoder = decoderFor(messageName);
      last = decoder;
    }
    if (bytes == null) {
      return null;
    }
    return decoder.decode(bytes);
  }

  /** The decoder for a fully qualified message name; cached per JVM. */
  public static MessageDecoder decoderFor(String messageName) {
    if (messageName == null) {
      throw new IllegalArgumentException("ProtoDecode: message name is null");
    }
    MessageDecoder d = DECODERS.get(messageName);
    if (d != null) {
      return d;
    }
    Descriptor desc = Holder.MESSAGES.get(messageName);
    if (desc == null) {
      throw new IllegalArgumentException(
          "ProtoDecode: unknown protobuf message '" + messageName + "' (not in the descriptor set "
              + DESCRIPTOR_RESOURCE + "; known: " + new java.util.TreeSet<>(Holder.MESSAGES.keySet())
              + ")");
    }
    return DECODERS.computeIfAbsent(messageName, n -> new MessageDecoder(n, desc));
  }

  private static final ConcurrentHashMap<String, MessageDecoder> DECODERS =
      new ConcurrentHashMap<>();

  /** Lazily loads the descriptor set once per JVM (class-holder idiom). */
  private static final class Holder {
    static final Map<String, Descriptor> MESSAGES = load();

    private static Map<String, Descriptor> load() {
      FileDescriptorSet set;
      try (InputStream in = ProtoDecode.class.getResourceAsStream(DESCRIPTOR_RESOURCE)) {
        if (in == null) {
          throw new IllegalStateException(
              "ProtoDecode: classpath resource " + DESCRIPTOR_RESOURCE
                  + " not found (is waku-proto-decode.jar on spark.jars?)");
        }
        set = FileDescriptorSet.parseFrom(in);
      } catch (IOException e) {
        throw new IllegalStateException("ProtoDecode: cannot read " + DESCRIPTOR_RESOURCE, e);
      }
      Map<String, FileDescriptorProto> protos = new HashMap<>();
      for (FileDescriptorProto p : set.getFileList()) {
        protos.put(p.getName(), p);
      }
      Map<String, FileDescriptor> built = new HashMap<>();
      Map<String, Descriptor> messages = new HashMap<>();
      for (FileDescriptorProto p : set.getFileList()) {
        FileDescriptor fd = build(p.getName(), protos, built, new HashSet<>());
        for (Descriptor d : fd.getMessageTypes()) {
          index(d, messages);
        }
      }
      return Collections.unmodifiableMap(messages);
    }

    private static FileDescriptor build(
        String name,
        Map<String, FileDescriptorProto> protos,
        Map<String, FileDescriptor> built,
        Set<String> inProgress) {
      FileDescriptor done = built.get(name);
      if (done != null) {
        return done;
      }
      FileDescriptorProto proto = protos.get(name);
      if (proto == null) {
        throw new IllegalStateException(
            "ProtoDecode: " + DESCRIPTOR_RESOURCE + " lacks imported file " + name
                + " (generate it with --include_imports)");
      }
      if (!inProgress.add(name)) {
        throw new IllegalStateException("ProtoDecode: import cycle at " + name);
      }
      FileDescriptor[] deps = new FileDescriptor[proto.getDependencyCount()];
      for (int i = 0; i < deps.length; i++) {
        deps[i] = build(proto.getDependency(i), protos, built, inProgress);
      }
      try {
        FileDescriptor fd = FileDescriptor.buildFrom(proto, deps);
        built.put(name, fd);
        return fd;
      } catch (DescriptorValidationException e) {
        throw new IllegalStateException("ProtoDecode: invalid descriptor " + name, e);
      }
    }

    private static void index(Descriptor d, Map<String, Descriptor> out) {
      out.put(d.getFullName(), d);
      for (Descriptor nested : d.getNestedTypes()) {
        index(nested, out);
      }
    }
  }

  /** Parser plus precompiled field converters for one top-level message type. */
  public static final class MessageDecoder {
    final String name;
    private final Parser<DynamicMessage> parser;
    private final StructConverter converter;

    MessageDecoder(String name, Descriptor desc) {
      this.name = name;
      this.parser = DynamicMessage.getDefaultInstance(desc).getParserForType();
      this.converter = new StructConverter(desc, new ArrayList<>());
    }

    /** Decodes one record; null when the bytes are not a valid encoding of the message. */
    public Row decode(byte[] bytes) {
      DynamicMessage m;
      try {
        m = parser.parseFrom(bytes, ExtensionRegistry.getEmptyRegistry());
      } catch (InvalidProtocolBufferException e) {
        return null;
      }
      return converter.toRow(m);
    }
  }

  /** Converts one protobuf field value (as DynamicMessage hands it out) to its Spark value. */
  private interface ValueConverter {
    Object convert(Object v);
  }

  private static final ValueConverter IDENTITY = v -> v;
  private static final ValueConverter BYTES = v -> ((ByteString) v).toByteArray();
  private static final ValueConverter UNSIGNED_INT = v -> Integer.toUnsignedLong((Integer) v);
  private static final ValueConverter ENUM_NAME = v -> ((EnumValueDescriptor) v).getName();

  private static final class StructConverter {
    private final FieldDescriptor[] fields;
    private final ValueConverter[] converters;
    // 0 = implicit presence, 1 = explicit presence, 2 = repeated, 3 = map
    private final int[] kinds;
    private final ValueConverter[] mapKeys;

    StructConverter(Descriptor desc, List<String> path) {
      if (path.contains(desc.getFullName())) {
        throw new IllegalArgumentException(
            "ProtoDecode: recursive message type " + desc.getFullName() + " via " + path);
      }
      path.add(desc.getFullName());
      List<FieldDescriptor> fs = desc.getFields();
      int n = fs.size();
      fields = fs.toArray(new FieldDescriptor[0]);
      converters = new ValueConverter[n];
      kinds = new int[n];
      mapKeys = new ValueConverter[n];
      for (int i = 0; i < n; i++) {
        FieldDescriptor f = fields[i];
        if (f.isMapField()) {
          Descriptor entry = f.getMessageType();
          kinds[i] = 3;
          mapKeys[i] = scalar(entry.findFieldByNumber(1), path);
          converters[i] = scalar(entry.findFieldByNumber(2), path);
        } else {
          kinds[i] = f.isRepeated() ? 2 : (f.hasPresence() ? 1 : 0);
          converters[i] = scalar(f, path);
        }
      }
      path.remove(path.size() - 1);
    }

    private static ValueConverter scalar(FieldDescriptor f, List<String> path) {
      switch (f.getType()) {
        case STRING:
        case BOOL:
        case INT32:
        case SINT32:
        case SFIXED32:
        case INT64:
        case SINT64:
        case SFIXED64:
        case UINT64:
        case FIXED64:
        case DOUBLE:
        case FLOAT:
          return IDENTITY;
        case UINT32:
        case FIXED32:
          return UNSIGNED_INT;
        case BYTES:
          return BYTES;
        case ENUM:
          return ENUM_NAME;
        case MESSAGE:
        case GROUP:
          StructConverter nested = new StructConverter(f.getMessageType(), path);
          return v -> nested.toRow((DynamicMessage) v);
        default:
          throw new IllegalArgumentException(
              "ProtoDecode: unsupported field type " + f.getType() + " of " + f.getFullName());
      }
    }

    Row toRow(DynamicMessage m) {
      int n = fields.length;
      Object[] values = new Object[n];
      for (int i = 0; i < n; i++) {
        FieldDescriptor f = fields[i];
        ValueConverter c = converters[i];
        switch (kinds[i]) {
          case 0:
            values[i] = c.convert(m.getField(f));
            break;
          case 1:
            values[i] = m.hasField(f) ? c.convert(m.getField(f)) : null;
            break;
          case 2: {
            List<?> in = (List<?>) m.getField(f);
            int size = in.size();
            Object[] out = new Object[size];
            for (int j = 0; j < size; j++) {
              out[j] = c.convert(in.get(j));
            }
            values[i] = java.util.Arrays.asList(out);
            break;
          }
          default: {
            List<?> entries = (List<?>) m.getField(f);
            Descriptor entry = f.getMessageType();
            FieldDescriptor kf = entry.findFieldByNumber(1);
            FieldDescriptor vf = entry.findFieldByNumber(2);
            ValueConverter kc = mapKeys[i];
            Map<Object, Object> out = new LinkedHashMap<>();
            for (Object e : entries) {
              DynamicMessage em = (DynamicMessage) e;
              out.put(kc.convert(em.getField(kf)), c.convert(em.getField(vf)));
            }
            values[i] = out;
          }
        }
      }
      return RowFactory.create(values);
    }
  }
}
