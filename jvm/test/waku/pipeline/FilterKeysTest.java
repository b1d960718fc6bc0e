package waku.pipeline;

import static org.junit.jupiter.api.Assertions.assertEquals;

import com.fasterxml.jackson.databind.JsonNode;

import java.util.ArrayList;
import java.util.List;

import org.apache.spark.sql.Row;
import org.junit.jupiter.api.DynamicTest;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestFactory;

class FilterKeysTest {
  /** [pubsub topic, content topic, hash hex] of FilterKeys' one row, or null when it gives none. */
  private static List<String> keys(byte[] ingest) {
    List<Row> rows = new FilterKeys().call(ingest);
    if (rows.isEmpty()) {
      return null;
    }
    assertEquals(1, rows.size());
    Row r = rows.get(0);
    return List.of(r.getString(0), r.getString(1), Bytes.hex((byte[]) r.get(2)));
  }

  @TestFactory
  List<DynamicTest> readsTheTopicsAndTheHashPythonComputes() {
    return Vectors.all("filter_keys").stream()
        .map(v -> DynamicTest.dynamicTest(v.get("name").asText(), () -> {
          JsonNode want = v.get("keys");
          List<String> expected = null;
          if (!want.isNull()) {
            expected = new ArrayList<>();
            for (JsonNode k : want) {
              expected.add(k.asText());
            }
          }
          assertEquals(expected, keys(Vectors.bytes(v, "hex")));
        }))
        .toList();
  }

  @Test
  void nullGivesNothing() {
    assertEquals(List.of(), new FilterKeys().call(null));
  }

  @Test
  void legacySecondsAreCastAsSparksTryCastCastsThem() {
    assertEquals(1_500_000_000_000_000_000L, FilterKeys.legacyNanos(1.5e9));
    assertEquals(-2_500_000_000L, FilterKeys.legacyNanos(-2.5));
    assertEquals(0L, FilterKeys.legacyNanos(Double.NaN));
    assertEquals(0L, FilterKeys.legacyNanos(Double.POSITIVE_INFINITY));
    assertEquals(0L, FilterKeys.legacyNanos(-1e300));
  }
}
