package waku.pipeline;

import org.apache.spark.sql.Row;
import org.apache.spark.sql.RowFactory;
import org.apache.spark.sql.api.java.UDF3;

import java.io.ByteArrayOutputStream;
import java.util.ArrayList;
import java.util.List;

/**
 * The filter job's lookup against the resident criteria ({@link CriteriaIndex}), grouped by
 * bridge: {@code (pubsub_topic, content_topic, index configuration JSON) ->
 * array<struct<bridge_id, targets>>}, one entry per bridge holding live subscribers (empty when
 * none), {@code targets} the PushRecord field 10 entries of its subscribers in the index's order
 * ({@link PushFanoutEncode} writes them into one PushRecord). A bridge whose subscribers' bytes
 * pass {@link #MAX_TARGET_BYTES} gets several entries, one after the other, so that no PushRecord
 * nears Kafka's 1 MB record limit (a WakuMessage is at most 150 KiB).
 */
public final class CriteriaFanout implements UDF3<String, String, String, List<Row>> {
  private static final long serialVersionUID = 1L;

  /** The most target bytes in one entry (~2,500 subscribers with 100-byte targets). */
  static final int MAX_TARGET_BYTES = 256 * 1024;

  @Override
  public List<Row> call(String pubsubTopic, String contentTopic, String config) {
    List<CriteriaIndex.Sub> subs = CriteriaIndex.forConfig(config).match(pubsubTopic, contentTopic);
    if (subs.isEmpty()) {
      return List.of();
    }
    List<String> bridges = new ArrayList<>(2);
    List<ByteArrayOutputStream> targets = new ArrayList<>(2);
    List<Row> out = new ArrayList<>(2);
    for (CriteriaIndex.Sub s : subs) {
      byte[] target = s.target();
      int i = bridges.indexOf(s.peer.bridgeId);
      if (i >= 0 && targets.get(i).size() + target.length > MAX_TARGET_BYTES) {
        out.add(RowFactory.create(bridges.get(i), targets.get(i).toByteArray()));  // full: a record of its own
        targets.get(i).reset();
      } else if (i < 0) {
        i = bridges.size();
        bridges.add(s.peer.bridgeId);
        targets.add(new ByteArrayOutputStream(Math.min(64 * subs.size(), MAX_TARGET_BYTES)));
      }
      targets.get(i).writeBytes(target);
    }
    for (int i = 0; i < bridges.size(); i++) {
      out.add(RowFactory.create(bridges.get(i), targets.get(i).toByteArray()));
    }
    return out;
  }
}
