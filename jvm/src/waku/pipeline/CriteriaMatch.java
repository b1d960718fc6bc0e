package waku.pipeline;

import org.apache.spark.sql.Row;
import org.apache.spark.sql.RowFactory;
import org.apache.spark.sql.api.java.UDF3;

import java.util.ArrayList;
import java.util.List;

/**
 * The filter job's lookup join against the resident criteria ({@link CriteriaIndex}):
 * {@code (pubsub_topic, content_topic, index configuration JSON) ->
 * array<struct<peer_id, bridge_id, protocol, request_id>>} of the criterion's live subscribers
 * (empty when none). The configuration is the same literal for every row of a job run, so the
 * index is found by a reference comparison and bootstrapped once per executor JVM.
 */
public final class CriteriaMatch implements UDF3<String, String, String, List<Row>> {
  private static final long serialVersionUID = 1L;

  @Override
  public List<Row> call(String pubsubTopic, String contentTopic, String config) {
    List<CriteriaIndex.Sub> subs = CriteriaIndex.forConfig(config).match(pubsubTopic, contentTopic);
    if (subs.isEmpty()) {
      return List.of();
    }
    List<Row> out = new ArrayList<>(subs.size());
    for (CriteriaIndex.Sub s : subs) {
      out.add(RowFactory.create(s.peer.peerId, s.peer.bridgeId, s.protocol, s.requestId));
    }
    return out;
  }
}
