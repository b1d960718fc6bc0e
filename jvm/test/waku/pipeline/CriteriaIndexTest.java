package waku.pipeline;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static waku.pipeline.Bytes.cat;
import static waku.pipeline.Bytes.doubleField;
import static waku.pipeline.Bytes.len;
import static waku.pipeline.Bytes.of;
import static waku.pipeline.Bytes.str;
import static waku.pipeline.Bytes.varintField;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Base64;
import java.util.List;

import org.apache.spark.sql.Row;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/** The resident criteria's rules (pipeline/filter/subscriptions.py states them for Delta), without Kafka. */
class CriteriaIndexTest {
  static final String TOPIC = "/waku/2/rs/1/0";
  static final double TTL = 300.0;

  /** Now, in Unix seconds: live criteria are stamped with it (the TTL is checked against the clock). */
  static double now() {
    return System.currentTimeMillis() / 1000.0;
  }

  /** A SubscriptionEvent (schemas/pipeline_records.proto) as the bridge encodes it. */
  static byte[] event(String peer, String bridge, int op, double time, String... contents) {
    List<byte[]> parts = new ArrayList<>();
    parts.add(str(1, peer));
    parts.add(str(2, bridge));
    parts.add(varintField(3, op));
    parts.add(str(4, TOPIC));
    for (String c : contents) {
      parts.add(str(5, c));
    }
    parts.add(doubleField(6, time));
    parts.add(str(7, "req-" + peer));
    parts.add(str(8, "v2"));
    return cat(parts.toArray(new byte[0][]));
  }

  static CriteriaIndex index() throws IOException {
    return CriteriaIndex.offline("{\"ttl_s\": " + TTL + "}");
  }

  static List<String> peers(CriteriaIndex idx, String content) {
    List<String> out = new ArrayList<>();
    for (CriteriaIndex.Sub s : idx.match(TOPIC, content)) {
      out.add(s.peer.peerId + "@" + s.peer.bridgeId);
    }
    out.sort(null);
    return out;
  }

  @AfterEach
  void forgetIndexes() {
    CriteriaIndex.closeAll();
  }

  @Test
  void theTestsEventsAreEncodedAsPythonsProtobufEncodesThem() throws IOException {
    byte[] python = Vectors.bytes(Vectors.named("subscription_event", "subscribe"), "hex");
    byte[] mine = cat(str(1, "16Uiu2peer"), str(2, "bridge-a"), varintField(3, 1), str(4, TOPIC),
        str(5, "/a/1/x/proto"), str(5, "/a/1/y/proto"), doubleField(6, 1732615200.5), str(7, "r1"), str(8, "v2"));
    assertArrayEquals(python, mine);
    CriteriaIndex idx = index();
    assertTrue(idx.applyEvent(python));
    List<String> rows = idx.rows();
    rows.sort(null);
    assertEquals(List.of(
        "16Uiu2peer\tbridge-a\t" + TOPIC + "\t/a/1/x/proto\tv2\tr1\t1.7326152005E9\t1.7326152005E9",
        "16Uiu2peer\tbridge-a\t" + TOPIC + "\t/a/1/y/proto\tv2\tr1\t1.7326152005E9\t1.7326152005E9"), rows);
  }

  @Test
  void aSubscriptionIsMatchedByItsTopicAndContentTopic() throws IOException {
    CriteriaIndex idx = index();
    assertTrue(idx.applyEvent(event("p1", "b1", CriteriaIndex.OP_SUBSCRIBE, now(), "/a", "/b")));
    assertTrue(idx.applyEvent(event("p2", "b1", CriteriaIndex.OP_SUBSCRIBE, now(), "/b")));
    assertEquals(List.of("p1@b1"), peers(idx, "/a"));
    assertEquals(List.of("p1@b1", "p2@b1"), peers(idx, "/b"));
    assertEquals(List.of(), peers(idx, "/c"));
    assertEquals(List.of(), idx.match("/other/pubsub", "/a"));
    assertEquals(List.of(), idx.match(null, "/a"));
    assertEquals(List.of(), idx.match(TOPIC, null));
    CriteriaIndex.Sub s = idx.match(TOPIC, "/a").get(0);
    assertEquals("v2", s.protocol);
    assertEquals("req-p1", s.requestId);
    assertEquals(3, idx.criteria);
    assertEquals(2, idx.events.get());
    assertEquals(4, idx.matched.get());
    assertEquals(7, idx.lookups.get());
  }

  @Test
  void aSecondSubscribeOfTheSameCriterionKeepsTheLaterTime() throws IOException {
    CriteriaIndex idx = index();
    double t = now();
    idx.applyEvent(event("p1", "b1", CriteriaIndex.OP_SUBSCRIBE, t, "/a"));
    idx.applyEvent(event("p1", "b1", CriteriaIndex.OP_SUBSCRIBE, t - 100, "/a"));
    assertEquals(1, idx.criteria);
    assertEquals(t, idx.match(TOPIC, "/a").get(0).time);
  }

  @Test
  void unsubscribeRemovesTheNamedContentTopicsOnly() throws IOException {
    CriteriaIndex idx = index();
    idx.applyEvent(event("p1", "b1", CriteriaIndex.OP_SUBSCRIBE, now(), "/a", "/b"));
    idx.applyEvent(event("p1", "b1", CriteriaIndex.OP_UNSUBSCRIBE, now(), "/a", "/never"));
    assertEquals(List.of(), peers(idx, "/a"));
    assertEquals(List.of("p1@b1"), peers(idx, "/b"));
    assertEquals(1, idx.criteria);
    assertTrue(idx.applyEvent(event("nobody", "b1", CriteriaIndex.OP_UNSUBSCRIBE, now(), "/b")));
    assertEquals(List.of("p1@b1"), peers(idx, "/b"));
  }

  @Test
  void unsubscribeAllAndExpireRemoveThePeersCriteriaAtThatBridge() throws IOException {
    for (int op : new int[] {CriteriaIndex.OP_UNSUBSCRIBE_ALL, CriteriaIndex.OP_EXPIRE}) {
      CriteriaIndex idx = index();
      idx.applyEvent(event("p1", "b1", CriteriaIndex.OP_SUBSCRIBE, now(), "/a", "/b"));
      idx.applyEvent(event("p1", "b2", CriteriaIndex.OP_SUBSCRIBE, now(), "/a"));
      idx.applyEvent(event("p1", "b1", op, now()));
      assertEquals(List.of("p1@b2"), peers(idx, "/a"), "op " + op);
      assertEquals(List.of(), peers(idx, "/b"), "op " + op);
      assertEquals(1, idx.criteria, "op " + op);
    }
  }

  @Test
  void aCriterionIsLiveWhileItsTimeOrItsPeersRefreshIsWithinTheTtl() throws IOException {
    CriteriaIndex idx = index();
    double old = now() - TTL - 60;
    idx.applyEvent(event("p1", "b1", CriteriaIndex.OP_SUBSCRIBE, old, "/a"));
    assertEquals(List.of(), peers(idx, "/a"));
    assertEquals(1, idx.rows().size());  // held until purged, but not matched
    idx.applyEvent(event("p1", "b1", CriteriaIndex.OP_REFRESH, now()));
    assertEquals(List.of("p1@b1"), peers(idx, "/a"));
    idx.applyEvent(event("p1", "b1", CriteriaIndex.OP_REFRESH, old));  // an older refresh lowers nothing
    assertEquals(List.of("p1@b1"), peers(idx, "/a"));
    assertTrue(idx.applyEvent(event("p9", "b1", CriteriaIndex.OP_REFRESH, now())));  // no such peer: nothing
    assertEquals(1, idx.rows().size());
  }

  @Test
  void aSubscribeRefreshesThePeersOtherCriteriaAsAPingDoes() throws IOException {
    // the bridge (and nwaku) keep one refresh time per peer: subscribing to /b at t keeps /a live
    CriteriaIndex idx = index();
    double t = now();
    idx.applyEvent(event("p1", "b1", CriteriaIndex.OP_SUBSCRIBE, t - TTL + 30, "/a"));
    idx.applyEvent(event("p2", "b1", CriteriaIndex.OP_SUBSCRIBE, t - TTL + 30, "/a"));
    idx.applyEvent(event("p1", "b1", CriteriaIndex.OP_SUBSCRIBE, t - 10, "/b"));
    idx.applyEvent(event("p1", "b2", CriteriaIndex.OP_SUBSCRIBE, t - 10));  // no content topic: refreshes p1@b2 only
    assertEquals(List.of("p1@b1", "p2@b1"), peers(idx, "/a"));
    assertEquals(List.of("p1@b1"), peers(idx, "/b"));
    assertEquals(3, idx.rows().size());
    assertEquals(List.of("p1\tb1\t" + TOPIC + "\t/a\tv2\treq-p1", "p1\tb1\t" + TOPIC + "\t/b\tv2\treq-p1"),
        idx.liveAt(t + 60));
    idx.purgeExpired(t + 60);
    assertEquals(2, idx.rows().size());  // p2's /a was not live: purged
    assertEquals(List.of(), idx.liveAt(t + TTL));
  }

  @Test
  void aSubscribeOfAPeerNotRefreshedWithinTheTtlDoesNotReviveItsOldCriteria() throws IOException {
    // the bridge expired p1 (its EXPIRE, best-effort, lost) and p1 subscribed again
    CriteriaIndex idx = index();
    double t = now();
    idx.applyEvent(event("p1", "b1", CriteriaIndex.OP_SUBSCRIBE, t - TTL - 20, "/a", "/b"));
    idx.applyEvent(event("p1", "b2", CriteriaIndex.OP_SUBSCRIBE, t - TTL - 20, "/a"));
    idx.applyEvent(event("p2", "b1", CriteriaIndex.OP_SUBSCRIBE, t - TTL, "/a"));
    idx.applyEvent(event("p1", "b1", CriteriaIndex.OP_SUBSCRIBE, t - 10, "/c"));
    idx.applyEvent(event("p2", "b1", CriteriaIndex.OP_SUBSCRIBE, t, "/c"));  // at the TTL's bound: refreshed
    assertEquals(List.of("p1\tb1\t" + TOPIC + "\t/c\tv2\treq-p1", "p2\tb1\t" + TOPIC + "\t/a\tv2\treq-p2",
        "p2\tb1\t" + TOPIC + "\t/c\tv2\treq-p2"), idx.liveAt(t));
    assertEquals(4, idx.rows().size());  // p1@b2's /a is held (not live) until purged
    // a REFRESH of a peer past the TTL (its REFRESHes lost: the bridge holds it) raises it, as ever
    idx.applyEvent(event("p1", "b2", CriteriaIndex.OP_REFRESH, t));
    assertEquals(List.of("p1@b2", "p2@b1"), peers(idx, "/a"));
  }

  @Test
  void aSnapshotsPeerIsTimedByItsRowsUntilAnEventRefreshesIt(@TempDir Path dir) throws IOException {
    double t = now();
    Files.writeString(dir.resolve("part-00000.txt"), row("p1", "b1", TOPIC, "/a", "v2", "r1", t - TTL - 1) + "\n"
        + row("p2", "b1", TOPIC, "/a", "v2", "r2", t) + "\n" + row("p2", "b1", TOPIC, "/b", "v2", "r2", t) + "\n");
    CriteriaIndex idx = CriteriaIndex.offline("{\"ttl_s\": " + TTL + ", \"snapshot\": \"" + dir.toUri() + "\"}");
    idx.applyEvent(event("p1", "b1", CriteriaIndex.OP_SUBSCRIBE, t, "/c"));  // the row is past the TTL: expired
    // p2's rows carry the refresh of events replayed after the snapshot (the snapshot was written
    // after them): the replay's own times count once it refreshed p2, so the gap inside it resets
    idx.applyEvent(event("p2", "b1", CriteriaIndex.OP_SUBSCRIBE, t - TTL - 50, "/a"));
    idx.applyEvent(event("p2", "b1", CriteriaIndex.OP_SUBSCRIBE, t, "/b"));
    assertEquals(List.of("p1\tb1\t" + TOPIC + "\t/c\tv2\treq-p1", "p2\tb1\t" + TOPIC + "\t/b\tv2\treq-p2"),
        idx.liveAt(t));
    assertEquals(2, idx.rows().size());
  }

  @Test
  void anUnsubscribeRefreshesThePeersRemainingCriteria() throws IOException {
    // nwaku's removeSubscription sets lastSeen (waku_filter_v2/subscriptions.nim), as the bridge does
    CriteriaIndex idx = index();
    double t = now();
    idx.applyEvent(event("p1", "b1", CriteriaIndex.OP_SUBSCRIBE, t - TTL + 5, "/a", "/b", "/c"));
    idx.applyEvent(event("p2", "b1", CriteriaIndex.OP_SUBSCRIBE, t - TTL + 5, "/a"));
    idx.applyEvent(event("p1", "b1", CriteriaIndex.OP_UNSUBSCRIBE, t - 10, "/b"));
    assertEquals(List.of("p1\tb1\t" + TOPIC + "\t/a\tv2\treq-p1", "p1\tb1\t" + TOPIC + "\t/c\tv2\treq-p1"),
        idx.liveAt(t + 30));  // p2 was not refreshed: not live any more
    idx.applyEvent(event("p1", "b1", CriteriaIndex.OP_UNSUBSCRIBE, t - 5, "/never"));  // held nowhere: refreshes too
    assertEquals(2, idx.liveAt(t + TTL - 6).size());
    idx.applyEvent(event("p1", "b1", CriteriaIndex.OP_UNSUBSCRIBE, t - 300 * TTL, "/c"));  // an older one lowers nothing
    assertEquals(List.of("p1\tb1\t" + TOPIC + "\t/a\tv2\treq-p1"), idx.liveAt(t + TTL - 6));
    idx.applyEvent(event("p1", "b1", CriteriaIndex.OP_UNSUBSCRIBE, t, "/a"));  // the last: the peer is gone
    assertEquals(List.of(), idx.liveAt(t + 30));
    assertEquals(1, idx.rows().size());  // p2's /a
  }

  @Test
  void aBridgeRestartRemovesItsCriteriaLastSubscribedBefore() throws IOException {
    CriteriaIndex idx = index();
    double t = now();
    idx.applyEvent(event("p1", "b1", CriteriaIndex.OP_SUBSCRIBE, t - 10, "/a"));
    idx.applyEvent(event("p2", "b1", CriteriaIndex.OP_SUBSCRIBE, t - 10, "/a"));
    idx.applyEvent(event("p3", "b1", CriteriaIndex.OP_SUBSCRIBE, t - 10, "/a", "/gone"));
    idx.applyEvent(event("p4", "b2", CriteriaIndex.OP_SUBSCRIBE, t - 10, "/a"));
    // the new run's events (at >= the restart) read before its restart record (another partition):
    // p2 subscribes to /b, refreshing its old /a too; p3 to /a again, refreshing its old /gone
    idx.applyEvent(event("p2", "b1", CriteriaIndex.OP_SUBSCRIBE, t - 4, "/b"));
    idx.applyEvent(event("p2", "b1", CriteriaIndex.OP_REFRESH, t - 1));
    idx.applyEvent(event("p3", "b1", CriteriaIndex.OP_SUBSCRIBE, t - 1, "/a"));
    assertTrue(idx.applyEvent(event(CriteriaIndex.RESTART_PEER, "b1", CriteriaIndex.OP_BRIDGE_RESTART, t - 5)));
    assertEquals(List.of("p3@b1", "p4@b2"), peers(idx, "/a"));  // p1's and p2's /a were the earlier run's
    assertEquals(List.of("p2@b1"), peers(idx, "/b"));
    assertEquals(List.of(), peers(idx, "/gone"));

    // An event of the bridge's earlier run, read after the restart from another partition: ignored.
    assertTrue(idx.applyEvent(event("p5", "b1", CriteriaIndex.OP_SUBSCRIBE, t - 6, "/a")));
    assertEquals(List.of("p3@b1", "p4@b2"), peers(idx, "/a"));
    idx.applyEvent(event("p5", "b1", CriteriaIndex.OP_SUBSCRIBE, t - 4, "/a"));
    assertEquals(List.of("p3@b1", "p4@b2", "p5@b1"), peers(idx, "/a"));
    // An older restart read later does not lower the mark.
    idx.applyEvent(event(CriteriaIndex.RESTART_PEER, "b1", CriteriaIndex.OP_BRIDGE_RESTART, t - 20));
    assertTrue(idx.applyEvent(event("p6", "b1", CriteriaIndex.OP_SUBSCRIBE, t - 6, "/a")));
    assertFalse(peers(idx, "/a").contains("p6@b1"));
  }

  @Test
  void aRestartGoesBySnapshotRowsSubscribedTime(@TempDir Path dir) throws IOException {
    // the snapshot's subscribed_time (its 8th field; empty for null, and a 7-field line has none:
    // both older than any restart), not its last_refresh, which a new run's event may have raised
    double t = now();
    Files.writeString(dir.resolve("part-00000.txt"), row("p1", "b1", TOPIC, "/a", "v2", "r1", t) + "\t" + (t - 1) + "\n"
        + row("p1", "b1", TOPIC, "/old", "v2", "r0", t) + "\t" + (t - 100) + "\n"
        + row("p2", "b1", TOPIC, "/a", "v2", "r2", t) + "\t\n" + row("p3", "b1", TOPIC, "/a", "v2", "r3", t) + "\n"
        + row("p4", "b2", TOPIC, "/a", "v2", "r4", t) + "\t" + (t - 100) + "\n");
    CriteriaIndex idx = CriteriaIndex.offline("{\"ttl_s\": " + TTL + ", \"snapshot\": \"" + dir.toUri() + "\"}");
    assertEquals(5, idx.snapshotRows);
    assertEquals(List.of("p1@b1", "p2@b1", "p3@b1", "p4@b2"), peers(idx, "/a"));
    idx.applyEvent(event(CriteriaIndex.RESTART_PEER, "b1", CriteriaIndex.OP_BRIDGE_RESTART, t - 10));
    assertEquals(List.of("p1@b1", "p4@b2"), peers(idx, "/a"));
    assertEquals(List.of(), peers(idx, "/old"));
  }

  @Test
  void eventsTheJobSkipsAreSkipped() throws IOException {
    CriteriaIndex idx = index();
    byte[] good = event("p1", "b1", CriteriaIndex.OP_SUBSCRIBE, now(), "/a");
    List<byte[]> bad = List.of(
        event("", "b1", CriteriaIndex.OP_SUBSCRIBE, now(), "/a"),  // no peer
        event("p1", "", CriteriaIndex.OP_SUBSCRIBE, now(), "/a"),  // no bridge
        event("p1", "b1", CriteriaIndex.OP_BRIDGE_RESTART, now()),  // a restart naming a peer
        event("p1", "b1", 0, now(), "/a"),  // OP_UNSPECIFIED
        event("p1", "b1", 7, now(), "/a"),  // an op of a later schema
        Arrays.copyOf(good, good.length - 3),  // truncated
        cat(len(1, of(0xC3, 0x28)), str(2, "b1"), varintField(3, 1)),  // a peer id that is not UTF-8
        of(0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x01),  // an oversized varint
        new byte[0]);
    for (byte[] b : bad) {
      assertFalse(idx.applyEvent(b), Bytes.hex(b));
    }
    assertEquals(bad.size(), idx.skipped.get());
    assertEquals(0, idx.events.get());
    assertEquals(0, idx.rows().size());
  }

  @Test
  void unknownFieldsAndKnownNumbersOfAnotherWireTypeAreIgnored() throws IOException {
    CriteriaIndex idx = index();
    byte[] e = cat(varintField(99, 1), str(1, "p1"), varintField(2, 5), str(2, "b1"), varintField(3, 1),
        str(4, TOPIC), str(5, "/a"), varintField(6, 3), doubleField(6, now()), str(20, "later field"));
    assertTrue(idx.applyEvent(e));
    assertEquals(List.of("p1@b1"), peers(idx, "/a"));
    // an op sent length-delimited is no op: skipped
    assertFalse(idx.applyEvent(cat(str(1, "p1"), str(2, "b1"), len(3, of(1)), str(4, TOPIC), str(5, "/b"))));
  }

  @Test
  void theSnapshotIsLoadedAndEventsApplyOnTopOfIt(@TempDir Path dir) throws IOException {
    double t = now();
    String lines = row("p1", "b1", TOPIC, "/a", "v2", "r1", t) + "\n" + row("p2", "b1", TOPIC, "/a", "v00", "r2", t)
        + "\n" + "too\tfew\tcolumns\n";
    Files.writeString(dir.resolve("part-00000.txt"), lines);
    Files.writeString(dir.resolve("part-00001.txt"), row("p1", "b1", TOPIC, "/b", "v2", "r3", t) + "\n");
    Files.writeString(dir.resolve("_SUCCESS"), "");
    Files.writeString(dir.resolve(".part-00000.txt.crc"), "not a snapshot");
    CriteriaIndex idx = CriteriaIndex.offline("{\"ttl_s\": 300, \"snapshot\": \"" + dir.toUri() + "\"}");
    assertEquals(3, idx.snapshotRows);
    assertEquals(List.of("p1@b1", "p2@b1"), peers(idx, "/a"));
    assertEquals("v00", idx.match(TOPIC, "/a").stream().filter(s -> s.peer.peerId.equals("p2")).findFirst()
        .orElseThrow().protocol);
    idx.applyEvent(event("p1", "b1", CriteriaIndex.OP_UNSUBSCRIBE_ALL, t));
    assertEquals(List.of("p2@b1"), peers(idx, "/a"));
    assertEquals(List.of(), peers(idx, "/b"));
  }

  private static String row(String peer, String bridge, String pubsub, String content, String protocol, String req,
      double time) {
    Base64.Encoder b = Base64.getEncoder();
    return String.join("\t", List.of(peer, bridge, pubsub, content, protocol, req).stream()
        .map(s -> b.encodeToString(s.getBytes(StandardCharsets.UTF_8))).toList()) + "\t" + time;
  }

  @Test
  void aMissingSnapshotIsAnError(@TempDir Path dir) {
    String config = "{\"snapshot\": \"" + dir.resolve("missing").toUri() + "\"}";
    IOException e = org.junit.jupiter.api.Assertions.assertThrows(IOException.class,
        () -> CriteriaIndex.offline(config));
    assertTrue(e.getMessage().contains("no such directory"));
  }

  @Test
  void committedOffsetsAreThoseOfTheLastCommittedBatch(@TempDir Path cp) throws IOException {
    assertEquals("", CriteriaIndex.committedOffsets(cp.toUri().toString(), "waku.subscriptions"));
    Files.createDirectories(cp.resolve("commits"));
    Files.createDirectories(cp.resolve("offsets"));
    assertEquals("", CriteriaIndex.committedOffsets(cp.toUri().toString(), "waku.subscriptions"));
    for (int batch = 0; batch <= 2; batch++) {
      Files.writeString(cp.resolve("offsets").resolve(Integer.toString(batch)),
          "v1\n{\"batchWatermarkMs\":0,\"batchTimestampMs\":1}\n{\"waku.subscriptions\":{\"0\":" + (10 * batch)
              + ",\"1\":" + (10 * batch + 1) + "}}\n");
    }
    Files.writeString(cp.resolve("commits").resolve("0"), "v1\n{}\n");
    Files.writeString(cp.resolve("commits").resolve("1"), "v1\n{}\n");
    Files.writeString(cp.resolve("commits").resolve(".1.crc"), "");
    // batch 2 has offsets but no commit: not yet in the sink's table
    assertEquals("{\"0\":10,\"1\":11}", CriteriaIndex.committedOffsets(cp.toUri().toString(), "waku.subscriptions"));
    assertEquals("", CriteriaIndex.committedOffsets(cp.toUri().toString(), "other.topic"));
  }

  @Test
  void criteriaFanoutGroupsTheSubscribersOfItsConfigurationsIndexByBridge() throws IOException {
    CriteriaIndex idx = CriteriaIndex.offline("{\"ttl_s\": 300, \"topic\": \"criteria-fanout-test\"}");
    idx.applyEvent(event("p1", "b1", CriteriaIndex.OP_SUBSCRIBE, now(), "/a"));
    idx.applyEvent(event("p2", "b2", CriteriaIndex.OP_SUBSCRIBE, now(), "/a"));
    idx.applyEvent(event("p3", "b1", CriteriaIndex.OP_SUBSCRIBE, now(), "/a"));
    CriteriaIndex.install(idx);
    List<Row> rows = new CriteriaFanout().call(TOPIC, "/a", new String(idx.config));  // an equal, other string
    assertEquals(2, rows.size());
    assertEquals("b1", rows.get(0).get(0));
    assertEquals(Bytes.hex(Bytes.cat(target("p1"), target("p3"))), Bytes.hex((byte[]) rows.get(0).get(1)));
    assertEquals("b2", rows.get(1).get(0));
    assertEquals(Bytes.hex(target("p2")), Bytes.hex((byte[]) rows.get(1).get(1)));
    assertEquals(List.of(), new CriteriaFanout().call(TOPIC, "/none", idx.config));
    assertEquals(List.of(), new CriteriaFanout().call(null, "/a", idx.config));
    assertTrue(CriteriaIndex.stats().contains("\"criteria\":3"), CriteriaIndex.stats());
  }

  @Test
  void aBridgeWithMoreSubscribersThanOneRecordHoldsGetsSeveralEntries() throws IOException {
    CriteriaIndex idx = CriteriaIndex.offline("{\"ttl_s\": 300, \"topic\": \"criteria-fanout-split-test\"}");
    int peers = 12_000;  // ~25 bytes a target: three full entries and a part
    for (int i = 0; i < peers; i++) {
      idx.applyEvent(event(String.format("p%05d", i), "b1", CriteriaIndex.OP_SUBSCRIBE, now(), "/a"));
    }
    CriteriaIndex.install(idx);
    List<Row> rows = new CriteriaFanout().call(TOPIC, "/a", idx.config);
    assertTrue(rows.size() > 1, "entries: " + rows.size());
    java.io.ByteArrayOutputStream all = new java.io.ByteArrayOutputStream();
    for (Row r : rows) {
      assertEquals("b1", r.get(0));
      byte[] targets = (byte[]) r.get(1);
      assertTrue(targets.length <= CriteriaFanout.MAX_TARGET_BYTES, "entry of " + targets.length);
      all.writeBytes(targets);
    }
    java.io.ByteArrayOutputStream want = new java.io.ByteArrayOutputStream();
    for (int i = 0; i < peers; i++) {
      want.writeBytes(target(String.format("p%05d", i)));
    }
    assertEquals(Bytes.hex(want.toByteArray()), Bytes.hex(all.toByteArray()));  // each once, in order
  }

  /** PushRecord field 10: a PushTarget of `peer` as event() subscribes it ("v2", "req-" + peer). */
  private static byte[] target(String peer) {
    return Bytes.len(10, Bytes.cat(Bytes.str(1, peer), Bytes.str(2, "v2"), Bytes.str(3, "req-" + peer)));
  }

  @Test
  void aFollowerThatEndedMakesEveryLookupFail() throws Exception {
    CriteriaIndex idx = index();
    idx.applyEvent(event("peer-a", "bridge-1", CriteriaIndex.OP_SUBSCRIBE, now(), "/a/1/x/proto"));
    assertEquals(1, idx.match(TOPIC, "/a/1/x/proto").size());
    Thread ended = new Thread(() -> { });
    ended.start();
    ended.join();
    idx.follower = ended;
    IllegalStateException e = org.junit.jupiter.api.Assertions.assertThrows(
        IllegalStateException.class, () -> idx.match(TOPIC, "/a/1/x/proto"));
    assertTrue(e.getMessage().contains("follower"), e.getMessage());
  }
}
