package waku.pipeline;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;

import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FSDataInputStream;
import org.apache.hadoop.fs.FileStatus;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.Path;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.common.PartitionInfo;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;

import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Base64;
import java.util.HashMap;
import java.util.HashSet;
import java.util.Iterator;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicLong;

/**
 * The filter job's resident criteria: one index per executor JVM (and per job run), kept in
 * memory and changed incrementally, so matching never re-reads Delta.
 *
 * <p>Bootstrap: the rows of Delta {@code subscriptions} the driver wrote at the job's start (a
 * text snapshot, base64 fields: see pipeline/filter/criteria.py), then every SubscriptionEvent of
 * {@code waku.subscriptions} from the subscriptions job's committed offsets read <em>before</em>
 * that snapshot, up to the topic's end at bootstrap. Only then does the index answer; a
 * background thread then follows the topic (poll wait {@code poll_ms}), so a subscription the
 * bridge answered 200 is matched within milliseconds. Replaying events the snapshot already holds
 * is harmless: every event sets or deletes what it names (the same rules as the subscriptions
 * job's MERGEs), so the state after the replay is the state after the log.
 *
 * <p>Rules (pipeline/filter/batch_effect.py, the durable side, states them for Delta; the three
 * forms are compared step by step by tests/filter_twins.py and CriteriaIndexTwinsTest):
 * SUBSCRIBE upserts the peer's criteria at its bridge (time = the later of the old and the event
 * time) and refreshes the peer as a REFRESH does (the TTL is the peer's: the bridge's view and
 * nwaku keep one refresh time per peer), but first, if the peer was last refreshed before its time
 * minus the TTL, deletes the peer's criteria (they expired: the bridge expired the peer and its
 * EXPIRE, sent best-effort, was lost; a SUBSCRIBE is the only event a bridge sends for a peer it
 * expired); UNSUBSCRIBE deletes them and refreshes the peer's others
 * (nwaku's removeSubscription sets {@code lastSeen} too); UNSUBSCRIBE_ALL and EXPIRE delete all the
 * peer's criteria at that bridge; REFRESH raises the peer's refresh time; BRIDGE_RESTART (peer "*") deletes the
 * bridge's criteria last <em>subscribed</em> before its time (each criterion keeps its latest SUBSCRIBE's
 * time, the table's {@code subscribed_time}: the restarted bridge holds nothing until a client
 * subscribes, but a SUBSCRIBE, PING or UNSUBSCRIBE of its new run refreshes all the peer's criteria,
 * those of its earlier run too, and may be read before the restart record, from another
 * partition); an event of that bridge older than its latest restart, read later from another
 * partition, is ignored. A criterion is live while
 * max(its time, its peer's refresh) is within the TTL. Events without peer or bridge, or a
 * BRIDGE_RESTART naming a peer, are skipped (as the job's decode_events does).
 *
 * <p>Readers (task threads) never lock: each criterion maps to an immutable array that the single
 * writer (the follower thread) replaces.
 */
public final class CriteriaIndex {
  private static final ObjectMapper JSON = new ObjectMapper();
  private static final ConcurrentHashMap<String, CriteriaIndex> INDEXES = new ConcurrentHashMap<>();
  private static volatile CriteriaIndex last;

  static final int OP_SUBSCRIBE = 1;
  static final int OP_UNSUBSCRIBE = 2;
  static final int OP_UNSUBSCRIBE_ALL = 3;
  static final int OP_EXPIRE = 4;
  static final int OP_REFRESH = 5;
  static final int OP_BRIDGE_RESTART = 6;
  static final String RESTART_PEER = "*";

  /** One subscriber of a criterion; immutable (replaced on change). */
  static final class Sub {
    final Peer peer;
    final String protocol;
    final String requestId;
    /** The latest SUBSCRIBE naming it, or the snapshot's last_refresh (its live time with the peer's refresh). */
    final double time;
    /** The latest SUBSCRIBE naming it (the table's subscribed_time; -Infinity when the snapshot has none). */
    final double subscribed;
    /** This subscriber as a fan-out PushRecord's field 10 entry, made at first use. */
    private byte[] target;

    Sub(Peer peer, String protocol, String requestId, double time, double subscribed) {
      this.peer = peer;
      this.protocol = protocol;
      this.requestId = requestId;
      this.time = time;
      this.subscribed = subscribed;
    }

    byte[] target() {
      byte[] t = target;
      if (t == null) {
        t = PushEncode.target(peer.peerId, protocol, requestId);
        target = t;  // a race makes the same bytes twice
      }
      return t;
    }
  }

  /** A peer at a bridge; `crits` (pubsub topic -> content topics) is the writer's only. */
  static final class Peer {
    final String peerId;
    final String bridgeId;
    volatile double refresh;
    /** Whether an event (not the snapshot) set `refresh`: the snapshot's peers are timed by their rows. */
    boolean refreshed;
    final HashMap<String, HashSet<String>> crits = new HashMap<>();

    Peer(String peerId, String bridgeId) {
      this.peerId = peerId;
      this.bridgeId = bridgeId;
    }

    int size() {
      int n = 0;
      for (HashSet<String> s : crits.values()) {
        n += s.size();
      }
      return n;
    }
  }

  private static final Sub[] NONE = new Sub[0];

  final String config;
  final double ttlS;
  private final String topic;
  private final Properties kafka;
  private final Map<Integer, Long> startOffsets;
  private final String snapshot;
  private final long pollMs;
  /** pubsub topic -> content topic -> subscribers. */
  private final ConcurrentHashMap<String, ConcurrentHashMap<String, Sub[]>> byTopic = new ConcurrentHashMap<>();
  private final HashMap<String, Peer> peers = new HashMap<>();
  private final HashMap<String, HashSet<Peer>> byBridge = new HashMap<>();
  /** bridge -> its latest BRIDGE_RESTART time: earlier SUBSCRIBEs of it read later are stale. */
  private final HashMap<String, Double> restarts = new HashMap<>();

  final AtomicLong events = new AtomicLong();
  final AtomicLong skipped = new AtomicLong();
  final AtomicLong matched = new AtomicLong();
  final AtomicLong lookups = new AtomicLong();
  volatile long criteria;
  volatile long snapshotRows;
  volatile long bootstrapMs;
  volatile long replayed;
  volatile long lastEventMs;
  volatile String error = "";
  private volatile boolean stopped;
  Thread follower;  // package-private: a test ends it
  final AtomicLong followerFailures = new AtomicLong();

  private CriteriaIndex(String config) {
    this.config = config;
    try {
      JsonNode c = JSON.readTree(config);
      this.ttlS = c.path("ttl_s").asDouble(300.0);
      this.topic = c.path("topic").asText("waku.subscriptions");
      this.snapshot = c.path("snapshot").asText("");
      this.pollMs = c.path("poll_ms").asLong(100);
      this.kafka = new Properties();
      Iterator<Map.Entry<String, JsonNode>> it = c.path("kafka").fields();
      while (it.hasNext()) {
        Map.Entry<String, JsonNode> e = it.next();
        kafka.put(e.getKey(), e.getValue().asText());
      }
      this.startOffsets = new HashMap<>();
      Iterator<Map.Entry<String, JsonNode>> off = c.path("offsets").fields();
      while (off.hasNext()) {
        Map.Entry<String, JsonNode> e = off.next();
        startOffsets.put(Integer.parseInt(e.getKey()), e.getValue().asLong());
      }
    } catch (IOException e) {
      throw new IllegalArgumentException("criteria index: bad configuration: " + e.getMessage(), e);
    }
  }

  /** The index of this job run (its JSON configuration), bootstrapped on first use. */
  public static CriteriaIndex forConfig(String config) {
    CriteriaIndex idx = last;
    if (idx != null && (idx.config == config || idx.config.equals(config))) {
      return idx;
    }
    idx = INDEXES.computeIfAbsent(config, k -> {
      CriteriaIndex fresh = new CriteriaIndex(k);
      fresh.start();
      return fresh;
    });
    last = idx;
    return idx;
  }

  /** Live subscribers of (pubsub topic, content topic) now. */
  public List<Sub> match(String pubsubTopic, String contentTopic) {
    checkFollower();
    lookups.incrementAndGet();
    if (pubsubTopic == null || contentTopic == null) {
      return List.of();
    }
    ConcurrentHashMap<String, Sub[]> byContent = byTopic.get(pubsubTopic);
    if (byContent == null) {
      return List.of();
    }
    Sub[] subs = byContent.get(contentTopic);
    if (subs == null || subs.length == 0) {
      return List.of();
    }
    double cutoff = System.currentTimeMillis() / 1000.0 - ttlS;
    ArrayList<Sub> out = new ArrayList<>(subs.length);
    for (Sub s : subs) {
      if (live(s, cutoff)) {
        out.add(s);
      }
    }
    matched.addAndGet(out.size());
    return out;
  }

  // -- bootstrap and follower ------------------------------------------------------------------

  private void start() {
    long began = System.currentTimeMillis();
    if (!snapshot.isEmpty()) {
      try {
        loadSnapshot();
      } catch (IOException e) {
        throw new IllegalStateException("criteria index: cannot read the snapshot " + snapshot + ": " + e, e);
      }
    }
    KafkaConsumer<byte[], byte[]> consumer = newConsumer();
    List<TopicPartition> parts = partitions(consumer, 60_000);
    consumer.assign(parts);
    Map<TopicPartition, Long> begin = consumer.beginningOffsets(parts);
    for (TopicPartition tp : parts) {
      Long from = startOffsets.get(tp.partition());
      long b = begin.getOrDefault(tp, 0L);
      consumer.seek(tp, from == null ? b : Math.max(from, b));
    }
    // Everything acknowledged before the job started is in the index before it answers.
    Map<TopicPartition, Long> end = consumer.endOffsets(parts);
    long deadline = System.currentTimeMillis() + 120_000;
    while (!caughtUp(consumer, end) && System.currentTimeMillis() < deadline) {
      replayed += apply(consumer.poll(Duration.ofMillis(200)));
    }
    bootstrapMs = System.currentTimeMillis() - began;
    follower = new Thread(() -> follow(consumer), "waku-criteria-index");
    follower.setDaemon(true);
    follower.start();
  }

  private static boolean caughtUp(KafkaConsumer<byte[], byte[]> consumer, Map<TopicPartition, Long> end) {
    for (Map.Entry<TopicPartition, Long> e : end.entrySet()) {
      if (consumer.position(e.getKey()) < e.getValue()) {
        return false;
      }
    }
    return true;
  }

  private KafkaConsumer<byte[], byte[]> newConsumer() {
    Properties p = new Properties();
    p.putAll(kafka);
    p.put("key.deserializer", ByteArrayDeserializer.class.getName());
    p.put("value.deserializer", ByteArrayDeserializer.class.getName());
    p.put("enable.auto.commit", "false");
    // fetch.min.bytes is 1: a fetch is answered as soon as an event is there; an idle topic costs
    // a fetch in 5 s (a 20 ms wait made it 50 a second, 500 ms 2: the follower's and the broker's
    // idle CPU). The follower sends nothing else once it follows, so nothing queues behind it.
    p.putIfAbsent("fetch.max.wait.ms", "5000");
    p.putIfAbsent("client.id", "waku-criteria-index");
    p.remove("group.id");
    ClassLoader saved = Thread.currentThread().getContextClassLoader();
    try {
      // Kafka loads the deserializers by name through the context loader; on executors our jar
      // is loaded by Spark's loader.
      Thread.currentThread().setContextClassLoader(CriteriaIndex.class.getClassLoader());
      return new KafkaConsumer<>(p);
    } finally {
      Thread.currentThread().setContextClassLoader(saved);
    }
  }

  private List<TopicPartition> partitions(KafkaConsumer<byte[], byte[]> consumer, long waitMs) {
    long deadline = System.currentTimeMillis() + waitMs;
    while (true) {
      List<PartitionInfo> infos = null;
      try {
        infos = consumer.partitionsFor(topic, Duration.ofSeconds(5));
      } catch (RuntimeException e) {
        error = e.toString();
      }
      if (infos != null && !infos.isEmpty()) {
        List<TopicPartition> out = new ArrayList<>();
        for (PartitionInfo i : infos) {
          out.add(new TopicPartition(topic, i.partition()));
        }
        return out;
      }
      if (System.currentTimeMillis() > deadline) {
        throw new IllegalStateException("criteria index: topic " + topic + " not found within "
            + waitMs / 1000 + " s (is a bridge with filter enabled running?)");
      }
      try {
        Thread.sleep(500);
      } catch (InterruptedException e) {
        Thread.currentThread().interrupt();
        throw new IllegalStateException(e);
      }
    }
  }

  private void follow(KafkaConsumer<byte[], byte[]> consumer) {
    long nextPurge = System.currentTimeMillis() + 30_000;
    try {
      while (!stopped) {
        try {
          apply(consumer.poll(Duration.ofMillis(pollMs)));
          error = "";
          if (System.currentTimeMillis() > nextPurge) {
            purgeExpired();
            nextPurge = System.currentTimeMillis() + 30_000;
          }
        } catch (RuntimeException e) {  // broker away: the consumer reconnects on the next poll
          followerFailures.incrementAndGet();
          error = e.toString();
          Thread.sleep(500);
        }
      }
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
    } catch (Error e) {  // the thread ends: match() fails from now on (see checkFollower)
      error = e.toString();
      throw e;
    } finally {
      consumer.close();
    }
  }

  /** A follower that ended while the index is in use would leave matches stale (new
   *  subscriptions never pushed): the lookup fails instead, so the filter job stops with an error
   *  (a non-zero exit) and is started again from its checkpoint, never serving half-working. */
  void checkFollower() {
    Thread f = follower;
    if (f != null && !stopped && !f.isAlive()) {
      throw new IllegalStateException("criteria index: its follower of " + topic + " ended ("
          + (error.isEmpty() ? "no error recorded" : error) + "); matching against a stale index refused");
    }
  }

  private int apply(ConsumerRecords<byte[], byte[]> records) {
    int n = 0;
    for (ConsumerRecord<byte[], byte[]> r : records) {
      if (applyEvent(r.value())) {
        n++;
      }
    }
    if (n > 0) {
      lastEventMs = System.currentTimeMillis();
    }
    return n;
  }

  // -- the rules -------------------------------------------------------------------------------

  /** Applies one SubscriptionEvent (bytes); false if skipped. Writer thread only. */
  public synchronized boolean applyEvent(byte[] value) {
    String peerId = "";
    String bridgeId = "";
    String pubsub = "";
    String requestId = "";
    String protocol = "";
    int op = 0;
    double time = 0;
    List<String> contents = new ArrayList<>();
    try {
      WireReader in = new WireReader(value);
      while (in.next()) {
        if (in.is(1, WireReader.LEN)) {
          peerId = in.string();
        } else if (in.is(2, WireReader.LEN)) {
          bridgeId = in.string();
        } else if (in.is(3, WireReader.VARINT)) {
          op = in.enumValue();
        } else if (in.is(4, WireReader.LEN)) {
          pubsub = in.string();
        } else if (in.is(5, WireReader.LEN)) {
          contents.add(in.string());
        } else if (in.is(6, WireReader.FIXED64)) {
          time = in.doubleValue();
        } else if (in.is(7, WireReader.LEN)) {
          requestId = in.string();
        } else if (in.is(8, WireReader.LEN)) {
          protocol = in.string();
        } else {
          in.skip();
        }
      }
    } catch (IOException | RuntimeException e) {
      skipped.incrementAndGet();
      return false;
    }
    if (peerId.isEmpty() || bridgeId.isEmpty() || (op == OP_BRIDGE_RESTART && !RESTART_PEER.equals(peerId))) {
      skipped.incrementAndGet();
      return false;
    }
    events.incrementAndGet();
    if (op != OP_BRIDGE_RESTART && time < restarts.getOrDefault(bridgeId, Double.NEGATIVE_INFINITY)) {
      return true;  // answered by the bridge's earlier run (its partition was read after the restart's)
    }
    switch (op) {
      case OP_SUBSCRIBE: {
        Peer p = peer(peerId, bridgeId, false);
        if (p != null && lastRefresh(p) < time - ttlS) {
          removeAll(p, Double.POSITIVE_INFINITY);  // expired: its EXPIRE was lost
        }
        p = peer(peerId, bridgeId, !contents.isEmpty());
        if (p != null) {
          for (String c : contents) {
            put(p, pubsub, c, protocol, requestId, time, time);
          }
          refresh(p, time);  // the peer's other criteria stay live as long as these
        }
        break;
      }
      case OP_UNSUBSCRIBE: {
        Peer p = peer(peerId, bridgeId, false);
        if (p != null) {
          for (String c : contents) {
            remove(p, pubsub, c);
          }
          dropIfEmpty(p);
          refresh(p, time);  // the peer's remaining criteria are refreshed (nwaku's removeSubscription)
        }
        break;
      }
      case OP_UNSUBSCRIBE_ALL:
      case OP_EXPIRE: {
        Peer p = peer(peerId, bridgeId, false);
        if (p != null) {
          removeAll(p, Double.POSITIVE_INFINITY);
        }
        break;
      }
      case OP_REFRESH: {
        Peer p = peer(peerId, bridgeId, false);
        if (p != null) {
          refresh(p, time);
        }
        break;
      }
      case OP_BRIDGE_RESTART: {
        restarts.merge(bridgeId, time, Math::max);
        HashSet<Peer> ps = byBridge.get(bridgeId);
        if (ps != null) {
          for (Peer p : new ArrayList<>(ps)) {
            removeSubscribedBefore(p, time);
          }
        }
        break;
      }
      default:
        events.decrementAndGet();
        skipped.incrementAndGet();
        return false;
    }
    return true;
  }

  private static void refresh(Peer p, double time) {
    if (time > p.refresh) {
      p.refresh = time;
    }
    p.refreshed = true;
  }

  /** The peer's refresh time before an event: its events' latest, or, for a peer of the snapshot
   *  no event has refreshed yet, its criteria's latest (the table's last_refresh). A snapshot
   *  written after events this index replays carries their refreshes: they are not used once
   *  the replay refreshed the peer (as batch_effect.expiries uses a batch's own refreshes). */
  private double lastRefresh(Peer p) {
    if (p.refreshed) {
      return p.refresh;
    }
    double last = p.refresh;
    for (Map.Entry<String, HashSet<String>> e : p.crits.entrySet()) {
      ConcurrentHashMap<String, Sub[]> byContent = byTopic.get(e.getKey());
      for (String content : e.getValue()) {
        Sub s = find(byContent, content, p);
        if (s != null && s.time > last) {
          last = s.time;
        }
      }
    }
    return last;
  }

  private Peer peer(String peerId, String bridgeId, boolean create) {
    String key = peerId + "\n" + bridgeId;
    Peer p = peers.get(key);
    if (p == null && create) {
      p = new Peer(peerId, bridgeId);
      peers.put(key, p);
      byBridge.computeIfAbsent(bridgeId, b -> new HashSet<>()).add(p);
    }
    return p;
  }

  private void dropIfEmpty(Peer p) {
    if (p.crits.isEmpty()) {
      peers.remove(p.peerId + "\n" + p.bridgeId);
      HashSet<Peer> ps = byBridge.get(p.bridgeId);
      if (ps != null) {
        ps.remove(p);
        if (ps.isEmpty()) {
          byBridge.remove(p.bridgeId);
        }
      }
    }
  }

  /** Upserts a criterion: `time` its live time, `subscribed` its SUBSCRIBE's time (neither lowered). */
  private void put(Peer p, String pubsub, String content, String protocol, String requestId, double time,
      double subscribed) {
    ConcurrentHashMap<String, Sub[]> byContent = byTopic.computeIfAbsent(pubsub, k -> new ConcurrentHashMap<>());
    Sub[] subs = byContent.getOrDefault(content, NONE);
    for (int i = 0; i < subs.length; i++) {
      if (subs[i].peer == p) {
        Sub[] copy = subs.clone();
        copy[i] = new Sub(p, protocol, requestId, Math.max(time, subs[i].time),
            Math.max(subscribed, subs[i].subscribed));
        byContent.put(content, copy);
        return;
      }
    }
    Sub[] grown = Arrays.copyOf(subs, subs.length + 1);
    grown[subs.length] = new Sub(p, protocol, requestId, time, subscribed);
    byContent.put(content, grown);
    p.crits.computeIfAbsent(pubsub, k -> new HashSet<>()).add(content);
    criteria++;
  }

  private void remove(Peer p, String pubsub, String content) {
    HashSet<String> mine = p.crits.get(pubsub);
    if (mine == null || !mine.remove(content)) {
      return;
    }
    if (mine.isEmpty()) {
      p.crits.remove(pubsub);
    }
    ConcurrentHashMap<String, Sub[]> byContent = byTopic.get(pubsub);
    Sub[] subs = byContent == null ? NONE : byContent.getOrDefault(content, NONE);
    int at = -1;
    for (int i = 0; i < subs.length; i++) {
      if (subs[i].peer == p) {
        at = i;
        break;
      }
    }
    if (at < 0) {
      return;
    }
    criteria--;
    if (subs.length == 1) {
      byContent.remove(content);
      return;
    }
    Sub[] shrunk = new Sub[subs.length - 1];
    System.arraycopy(subs, 0, shrunk, 0, at);
    System.arraycopy(subs, at + 1, shrunk, at, subs.length - at - 1);
    byContent.put(content, shrunk);
  }

  /** Removes the peer's criteria whose live time (max of its time and the refresh) is before `before`. */
  private void removeAll(Peer p, double before) {
    for (Map.Entry<String, HashSet<String>> e : new ArrayList<>(p.crits.entrySet())) {
      String pubsub = e.getKey();
      ConcurrentHashMap<String, Sub[]> byContent = byTopic.get(pubsub);
      for (String content : new ArrayList<>(e.getValue())) {
        if (before != Double.POSITIVE_INFINITY) {
          Sub s = find(byContent, content, p);
          if (s != null && Math.max(s.time, p.refresh) >= before) {
            continue;
          }
        }
        remove(p, pubsub, content);
      }
    }
    dropIfEmpty(p);
  }

  /** A bridge restart at `restart`: removes the peer's criteria no SUBSCRIBE named since (those
   *  of the bridge's earlier run, however recently the new run refreshed the peer). */
  private void removeSubscribedBefore(Peer p, double restart) {
    for (Map.Entry<String, HashSet<String>> e : new ArrayList<>(p.crits.entrySet())) {
      String pubsub = e.getKey();
      ConcurrentHashMap<String, Sub[]> byContent = byTopic.get(pubsub);
      for (String content : new ArrayList<>(e.getValue())) {
        Sub s = find(byContent, content, p);
        if (s == null || s.subscribed < restart) {
          remove(p, pubsub, content);
        }
      }
    }
    dropIfEmpty(p);
  }

  private static Sub find(ConcurrentHashMap<String, Sub[]> byContent, String content, Peer p) {
    if (byContent == null) {
      return null;
    }
    for (Sub s : byContent.getOrDefault(content, NONE)) {
      if (s.peer == p) {
        return s;
      }
    }
    return null;
  }

  /** Whether a criterion counts (is matched) at `cutoff` = now - TTL. */
  static boolean live(Sub s, double cutoff) {
    return Math.max(s.time, s.peer.refresh) >= cutoff;
  }

  private void purgeExpired() {
    purgeExpired(System.currentTimeMillis() / 1000.0);
  }

  /** Drops the criteria not live at `now` (Unix seconds). */
  synchronized void purgeExpired(double now) {
    double cutoff = now - ttlS;
    for (Peer p : new ArrayList<>(peers.values())) {
      if (p.refresh < cutoff) {
        removeAll(p, cutoff);
      }
    }
  }

  /** Snapshot lines: base64(peer) \t base64(bridge) \t base64(pubsub) \t base64(content) \t
   *  base64(protocol) \t base64(request id) \t last_refresh \t subscribed_time (empty when null:
   *  before any restart; a line without it, of an earlier writer, is read so too). */
  private synchronized void loadSnapshot() throws IOException {
    Configuration conf = hadoopConf();
    Path dir = new Path(snapshot);
    FileSystem fs = dir.getFileSystem(conf);
    if (!fs.exists(dir)) {
      throw new IOException("no such directory");
    }
    Base64.Decoder b64 = Base64.getDecoder();
    HashMap<String, String> intern = new HashMap<>();
    long rows = 0;
    for (FileStatus f : fs.listStatus(dir)) {
      String name = f.getPath().getName();
      if (!f.isFile() || name.startsWith("_") || name.startsWith(".")) {
        continue;
      }
      try (FSDataInputStream in = fs.open(f.getPath());
           BufferedReader r = new BufferedReader(new InputStreamReader(in, StandardCharsets.UTF_8), 1 << 16)) {
        String line;
        while ((line = r.readLine()) != null) {
          String[] c = line.split("\t", -1);
          if (c.length != 7 && c.length != 8) {
            continue;
          }
          String peerId = text(b64, c[0], intern);
          String bridgeId = text(b64, c[1], intern);
          String pubsub = text(b64, c[2], intern);
          String content = text(b64, c[3], null);
          String protocol = text(b64, c[4], intern);
          String requestId = text(b64, c[5], null);
          double time = Double.parseDouble(c[6]);
          double subscribed = c.length < 8 || c[7].isEmpty() ? Double.NEGATIVE_INFINITY : Double.parseDouble(c[7]);
          put(peer(peerId, bridgeId, true), pubsub, content, protocol, requestId, time, subscribed);
          rows++;
        }
      }
    }
    snapshotRows = rows;
  }

  /** The Hadoop configuration of this JVM's Spark: its `spark.hadoop.*` settings (an s3a://
   *  store's endpoint and keys) come from the SparkEnv's conf, which an executor receives from
   *  the driver (SparkHadoopUtil's own conf holds only this JVM's system properties); outside
   *  Spark, Hadoop's defaults. */
  static Configuration hadoopConf() {
    try {
      org.apache.spark.SparkEnv env = org.apache.spark.SparkEnv.get();
      if (env != null) {
        return org.apache.spark.deploy.SparkHadoopUtil.get().newConfiguration(env.conf());
      }
      return org.apache.spark.deploy.SparkHadoopUtil.get().conf();
    } catch (RuntimeException | NoClassDefFoundError e) {
      return new Configuration();
    }
  }

  private static String text(Base64.Decoder b64, String field, HashMap<String, String> intern) {
    String s = new String(b64.decode(field), StandardCharsets.UTF_8);
    return intern == null ? s : intern.computeIfAbsent(s, k -> k);
  }

  // -- driver-side helpers (called through py4j) ------------------------------------------------

  /** JSON {"partition": offset} of `topic` in the offset log of the last committed batch of the
   *  streaming checkpoint at `checkpoint` (any Hadoop file system), or "" if there is none. A
   *  batch's sink writes precede its commit marker, so everything before these offsets is in the
   *  sink's table. */
  public static String committedOffsets(String checkpoint, String topic) throws IOException {
    Configuration conf = hadoopConf();
    Path commits = new Path(checkpoint, "commits");
    FileSystem fs = commits.getFileSystem(conf);
    if (!fs.exists(commits)) {
      return "";
    }
    long batch = -1;
    for (FileStatus f : fs.listStatus(commits)) {
      try {
        batch = Math.max(batch, Long.parseLong(f.getPath().getName()));
      } catch (NumberFormatException e) {
        // .crc and temporary files
      }
    }
    if (batch < 0) {
      return "";
    }
    Path offsets = new Path(new Path(checkpoint, "offsets"), Long.toString(batch));
    try (FSDataInputStream in = fs.open(offsets);
         BufferedReader r = new BufferedReader(new InputStreamReader(in, StandardCharsets.UTF_8))) {
      String line;
      while ((line = r.readLine()) != null) {
        line = line.trim();
        if (!line.startsWith("{")) {
          continue;
        }
        JsonNode node = JSON.readTree(line).get(topic);
        if (node != null && node.isObject()) {
          return JSON.writeValueAsString(node);
        }
      }
    }
    return "";
  }

  /** JSON figures of every index in this JVM (the driver's, in local mode). */
  public static String stats() {
    StringBuilder sb = new StringBuilder("[");
    for (CriteriaIndex i : INDEXES.values()) {
      if (sb.length() > 1) {
        sb.append(',');
      }
      Map<String, Object> m = new HashMap<>();
      m.put("criteria", i.criteria);
      m.put("peers", i.peers.size());
      m.put("events", i.events.get());
      m.put("skipped", i.skipped.get());
      m.put("lookups", i.lookups.get());
      m.put("matched", i.matched.get());
      m.put("snapshot_rows", i.snapshotRows);
      m.put("replayed", i.replayed);
      m.put("bootstrap_ms", i.bootstrapMs);
      m.put("last_event_ms", i.lastEventMs);
      m.put("error", i.error);
      m.put("follower_failures", i.followerFailures.get());
      m.put("follower_alive", i.follower == null || i.follower.isAlive());
      try {
        sb.append(JSON.writeValueAsString(m));
      } catch (IOException e) {
        sb.append("{}");
      }
    }
    return sb.append(']').toString();
  }

  /** An index that follows no topic: the snapshot of `config` (if any) loaded, events given by
   *  {@link #applyEvent}. For tests that compare the index's rules with the subscriptions job's. */
  public static CriteriaIndex offline(String config) throws IOException {
    CriteriaIndex idx = new CriteriaIndex(config);
    if (!idx.snapshot.isEmpty()) {
      idx.loadSnapshot();
    }
    return idx;
  }

  /** Makes `idx` (an {@link #offline} index) the one {@link #forConfig} returns for its configuration,
   *  as if bootstrapped: for tests of {@link CriteriaFanout} without Kafka. {@link #closeAll} forgets it. */
  static void install(CriteriaIndex idx) {
    INDEXES.put(idx.config, idx);
    last = idx;
  }

  /** Every criterion held, live or not: "peer\tbridge\tpubsub\tcontent\tprotocol\trequest id\tlive time\t
   *  subscribed time" lines (live time = max(criterion time, peer refresh); subscribed time = its latest
   *  SUBSCRIBE's, -Infinity for a snapshot row without one). */
  public synchronized List<String> rows() {
    List<String> out = new ArrayList<>();
    for (Map.Entry<String, ConcurrentHashMap<String, Sub[]>> t : byTopic.entrySet()) {
      for (Map.Entry<String, Sub[]> c : t.getValue().entrySet()) {
        for (Sub s : c.getValue()) {
          out.add(s.peer.peerId + "\t" + s.peer.bridgeId + "\t" + t.getKey() + "\t" + c.getKey() + "\t"
              + s.protocol + "\t" + s.requestId + "\t" + Math.max(s.time, s.peer.refresh) + "\t" + s.subscribed);
        }
      }
    }
    return out;
  }

  /** The criteria live at `now` (Unix seconds), as {@link #match} finds them then:
   *  "peer\tbridge\tpubsub\tcontent\tprotocol\trequest id" lines, sorted. */
  synchronized List<String> liveAt(double now) {
    double cutoff = now - ttlS;
    List<String> out = new ArrayList<>();
    for (Map.Entry<String, ConcurrentHashMap<String, Sub[]>> t : byTopic.entrySet()) {
      for (Map.Entry<String, Sub[]> c : t.getValue().entrySet()) {
        for (Sub s : c.getValue()) {
          if (live(s, cutoff)) {
            out.add(s.peer.peerId + "\t" + s.peer.bridgeId + "\t" + t.getKey() + "\t" + c.getKey() + "\t"
                + s.protocol + "\t" + s.requestId);
          }
        }
      }
    }
    out.sort(null);
    return out;
  }

  /** Stops every index's follower (tests; a JVM that runs several job runs). */
  public static void closeAll() {
    for (CriteriaIndex i : INDEXES.values()) {
      i.stopped = true;
    }
    INDEXES.clear();
    last = null;
  }
}
