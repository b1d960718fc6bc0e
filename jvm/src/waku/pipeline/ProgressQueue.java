package waku.pipeline;

import com.fasterxml.jackson.core.JsonProcessingException;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.concurrent.ConcurrentLinkedQueue;
import org.apache.spark.sql.streaming.StreamingQueryListener;

/**
 * A streaming query listener that keeps each event as one line of JSON until the job's Python
 * side takes them (drain), instead of a Python listener called through py4j per event.
 *
 * <p>PySpark's Python listener converts every progress into Python objects field by field, a
 * few dozen py4j calls whose Java side (on Spark's listener thread) resolved names through the
 * class path: about 53 ms of the driver's CPU per progress event, measured with a listener that
 * does nothing (pipeline/spark/metrics.py; docs/decisions.md, session 20). Here an event costs
 * its JSON text, and the Python side takes all lines in one call.
 *
 * <p>Lines: {"event":"started","id":..,"runId":..,"name":..},
 * {"event":"progress","progress":<StreamingQueryProgress.json>},
 * {"event":"terminated","id":..,"runId":..,"exception":..}.
 */
public class ProgressQueue extends StreamingQueryListener {

  private static final ObjectMapper JSON = new ObjectMapper();
  private final ConcurrentLinkedQueue<String> lines = new ConcurrentLinkedQueue<>();

  private static String line(Map<String, Object> fields) {
    try {
      return JSON.writeValueAsString(fields);
    } catch (JsonProcessingException e) {
      throw new IllegalStateException(e);
    }
  }

  @Override
  public void onQueryStarted(QueryStartedEvent event) {
    Map<String, Object> fields = new LinkedHashMap<>();
    fields.put("event", "started");
    fields.put("id", event.id().toString());
    fields.put("runId", event.runId().toString());
    fields.put("name", event.name());
    lines.add(line(fields));
  }

  @Override
  public void onQueryProgress(QueryProgressEvent event) {
    lines.add("{\"event\":\"progress\",\"progress\":" + event.progress().json() + "}");
  }

  @Override
  public void onQueryIdle(QueryIdleEvent event) {
    // nothing to record: no batch ran
  }

  @Override
  public void onQueryTerminated(QueryTerminatedEvent event) {
    Map<String, Object> fields = new LinkedHashMap<>();
    fields.put("event", "terminated");
    fields.put("id", event.id().toString());
    fields.put("runId", event.runId().toString());
    fields.put("exception", event.exception().isDefined() ? event.exception().get() : null);
    lines.add(line(fields));
  }

  /** Every line queued so far, oldest first, newline-separated ("" when none). */
  public String drain() {
    StringBuilder out = new StringBuilder();
    String next;
    while ((next = lines.poll()) != null) {
      if (out.length() > 0) {
        out.append('\n');
      }
      out.append(next);
    }
    return out.toString();
  }
}
