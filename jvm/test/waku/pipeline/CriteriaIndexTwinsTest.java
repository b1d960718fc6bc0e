package waku.pipeline;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;

import java.io.File;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Base64;
import java.util.List;

import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * The resident index against the bridge's state machine (issue 69): the seeded sequence of
 * jvm/test/subscription_vectors.json (tests/filter_twins.py, written by
 * jvm/test/make_subscription_vectors.py) replayed event by event; after every step the criteria
 * live at the step's time must be those the bridge holds. A filter job restart builds a new index
 * as the job does: the snapshot of the subscriptions table, then the events from the committed
 * offset. Events come in the order the jobs read them: a bridge restart's record is read late at
 * times, after its new run's first events; while a partition is held back ("held") the index lags
 * the bridge, and the step is not compared. The Python side (tests/unit/test_filter_twins.py) checks the subscriptions job's fold
 * against the same sequence.
 */
class CriteriaIndexTwinsTest {
  private static final Base64.Encoder B64 = Base64.getEncoder();

  @AfterEach
  void forgetIndexes() {
    CriteriaIndex.closeAll();
  }

  private static String b64(String s) {
    return B64.encodeToString(s.getBytes(StandardCharsets.UTF_8));
  }

  /** A snapshot directory as pipeline/filter/criteria.write_snapshot writes it. */
  private static Path snapshot(Path dir, JsonNode rows) throws IOException {
    Files.createDirectories(dir);
    StringBuilder sb = new StringBuilder();
    for (JsonNode r : rows) {
      for (int i = 0; i < 6; i++) {
        sb.append(b64(r.get(i).asText())).append('\t');
      }
      sb.append(Double.toString(r.get(6).asDouble())).append('\t');
      sb.append(r.get(7).isNull() ? "" : Double.toString(r.get(7).asDouble())).append('\n');  // subscribed_time
    }
    Files.writeString(dir.resolve("part-00000.txt"), sb.toString());
    Files.writeString(dir.resolve("_SUCCESS"), "");
    return dir;
  }

  @Test
  void theIndexHoldsWhatTheBridgeHoldsAfterEveryStep(@TempDir Path dir) throws IOException {
    String path = System.getProperty("waku.test.subscription_vectors", "jvm/test/subscription_vectors.json");
    JsonNode root = new ObjectMapper().readTree(new File(path));
    double ttl = root.get("ttl_s").asDouble();
    System.out.println("CriteriaIndexTwinsTest: seed " + root.get("seed").asLong() + ", "
        + root.get("steps").size() + " steps");
    String config = "{\"ttl_s\": " + ttl + "}";
    CriteriaIndex idx = CriteriaIndex.offline(config);
    List<byte[]> log = new ArrayList<>();
    int index = 0;
    int rebuilds = 0;
    int nonEmpty = 0;
    int held = 0;
    for (JsonNode step : root.get("steps")) {
      double now = step.get("now").asDouble();
      List<byte[]> events = new ArrayList<>();
      for (JsonNode e : step.get("events")) {
        events.add(Bytes.hex(e.asText()));
      }
      log.addAll(events);
      String what = "step " + index + " (" + step.get("what").asText() + ")";
      JsonNode rebuild = step.get("rebuild");
      if (rebuild != null) {
        Path snap = snapshot(dir.resolve("snapshot-" + index), rebuild.get("snapshot"));
        idx = CriteriaIndex.offline("{\"ttl_s\": " + ttl + ", \"snapshot\": \"" + snap.toUri() + "\"}");
        assertEquals(rebuild.get("snapshot").size(), idx.snapshotRows, what);
        for (byte[] e : log.subList(rebuild.get("from").asInt(), log.size())) {
          assertTrue(idx.applyEvent(e), what);
        }
        rebuilds++;
      } else {
        for (byte[] e : events) {
          assertTrue(idx.applyEvent(e), what + ": event " + Bytes.hex(e));
        }
      }
      if (step.path("purge").asBoolean(false)) {
        idx.purgeExpired(now);
      }
      index++;
      if (step.path("held").asBoolean(false)) {
        held++;
        continue;
      }
      List<String> want = new ArrayList<>();
      step.get("criteria").forEach(c -> want.add(c.asText()));
      assertEquals(want, idx.liveAt(now), what);
      if (!want.isEmpty()) {
        nonEmpty++;
      }
    }
    assertTrue(rebuilds > 0 && nonEmpty > index / 2 && held > 0,
        rebuilds + " rebuilds, " + nonEmpty + " steps with criteria, " + held + " held back");
  }
}
