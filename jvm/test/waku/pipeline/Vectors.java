package waku.pipeline;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;

import java.io.File;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.util.ArrayList;
import java.util.List;

/** jvm/test/vectors.json: encodings by Python's protobuf, written by jvm/test/make_vectors.py. */
final class Vectors {
  private static JsonNode root;

  private Vectors() {
  }

  private static synchronized JsonNode root() {
    if (root == null) {
      String path = System.getProperty("waku.test.vectors", "jvm/test/vectors.json");
      try {
        root = new ObjectMapper().readTree(new File(path));
      } catch (IOException e) {
        throw new UncheckedIOException("cannot read the test vectors " + path, e);
      }
    }
    return root;
  }

  static List<JsonNode> all(String section) {
    List<JsonNode> out = new ArrayList<>();
    root().get(section).forEach(out::add);
    if (out.isEmpty()) {
      throw new IllegalStateException("no vectors in " + section);
    }
    return out;
  }

  static JsonNode named(String section, String name) {
    for (JsonNode v : all(section)) {
      if (v.get("name").asText().equals(name)) {
        return v;
      }
    }
    throw new IllegalArgumentException("no vector " + section + "/" + name);
  }

  static byte[] bytes(JsonNode v, String field) {
    return Bytes.hex(v.get(field).asText());
  }
}
