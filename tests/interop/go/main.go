// wakuinterop: a reference Waku v2 client built on go-waku v0.10.0, used by the
// bridge's interop tests. One command per run; JSON lines on stdout (the last one is
// the summary), logs on stderr. See README.md beside this file.
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	logging "github.com/ipfs/go-log/v2"
	wprotocol "github.com/waku-org/go-waku/waku/v2/protocol"
	"go.uber.org/zap/zapcore"
)

var startTime = time.Now()

const usage = `wakuinterop COMMAND [flags]

Commands:
  stay           --seconds S
  relay-publish  --count N [--rate R] [--payload-size B] [--seconds S]
  relay-receive  --count N
  filter         --seconds S [--content-topic C ...] [--ping-every P] [--count N]
  store          [--page-size P] [--forward] [--hashes h1,h2] [--content-topic C ...]
  lightpush      --count N [--rate R]
  store-bench    --seconds S [--pubsub-topics T1,T2] [--content-topic C ...] [--start-ns A --end-ns B] [--seed N] [--rate R] [--plan FILE] [--times]
                 (a load client of tests/benchmarks/store_query.py: waits for a line on stdin) [--legacy]
  filter-many    --clients N --seconds S [--content-topic C ...] [--keep-streams]   (tests/benchmarks/side_by_side.py)
  store-probe    --seconds S [--interval-ms I] [--legacy]          (tests/benchmarks/side_by_side.py)
  enr-decode     --enr enr:...   (go-waku's ENR parser; no --peer)
  serve          --seconds S     (a go-waku relay node that prints its ENR and dials nobody; no --peer)
  px             --count N       (go-waku's peer-exchange client asks --peer, then dials what it got)

Common flags: --peer MULTIADDR (required) --cluster-id N (1) --pubsub-topic T (/waku/2/rs/1/0)
  --content-topic C (/interop/1/test/proto) --timeout SECONDS (60) --prefix P (random)
  --log-level debug|info|warn|error (warn)
Run "wakuinterop COMMAND -h" for every flag.
`

// strList is a repeatable flag; the first use replaces the default.
type strList struct {
	vals    []string
	touched bool
}

func (s *strList) String() string { return strings.Join(s.vals, ",") }
func (s *strList) Set(v string) error {
	if !s.touched {
		s.vals = nil
		s.touched = true
	}
	s.vals = append(s.vals, v)
	return nil
}

type options struct {
	command       string
	peer          string
	clusterID     uint
	pubsubTopic   string
	contentTopics strList
	timeout       float64
	prefix        string
	logLevel      string

	seconds     float64
	count       int
	rate        float64
	payloadSize int
	quiet       bool
	linger      float64
	meshWait    float64
	validateQ   int

	pingEvery float64
	pushRate  float64
	pushBurst int

	pageSize      uint64
	forward       bool
	hashes        string
	includeData   bool
	startNs       int64
	endNs         int64
	skipRateLimit bool

	benchPubsub string
	seed        int64
	plan        string // store-bench: a file of queries to page, one JSON object a line
	times       bool   // store-bench: each page's due time in the summary

	clients    int     // filter-many
	keepStream bool    // filter-many: read every push of a stream until it ends (nwaku, js-waku)
	connRate   float64 // filter-many: clients started per second (0: all at once)
	intervalMs float64 // store-probe
	legacy     bool    // store-bench, store-probe: go-waku's legacy store protocol
	rotateCT   bool    // relay-publish: message i on content topic i mod len(--content-topic)
	enr        string  // enr-decode

	set         map[string]bool // flags given on the command line
	autosharded bool            // --pubsub-topic "" resolved from the content topic
}

func (o *options) contentTopic() string {
	if len(o.contentTopics.vals) == 0 {
		return ""
	}
	return o.contentTopics.vals[0]
}

func (o *options) timeoutDur() time.Duration {
	return time.Duration(o.timeout * float64(time.Second))
}

func parseArgs(args []string) (*options, error) {
	o := &options{}
	if len(args) == 0 || strings.HasPrefix(args[0], "-") {
		return nil, fmt.Errorf("missing command\n%s", usage)
	}
	o.command = args[0]
	switch o.command {
	case "stay", "relay-publish", "relay-receive", "filter", "store", "lightpush", "store-bench", "filter-many", "store-probe",
		"enr-decode", "serve", "px":
	case "help":
		fmt.Fprint(os.Stderr, usage)
		os.Exit(0)
	default:
		return nil, fmt.Errorf("unknown command %q\n%s", o.command, usage)
	}
	fs := flag.NewFlagSet(o.command, flag.ContinueOnError)
	fs.SetOutput(os.Stderr)
	o.contentTopics.vals = []string{"/interop/1/test/proto"}

	fs.StringVar(&o.peer, "peer", "", "multiaddr of the bridge, /ip4/127.0.0.1/tcp/PORT/p2p/ID (required)")
	fs.UintVar(&o.clusterID, "cluster-id", 1, "cluster id (0 disables go-waku's metadata check)")
	fs.StringVar(&o.pubsubTopic, "pubsub-topic", "/waku/2/rs/1/0", "pubsub topic (\"\": autosharding of the first content topic, as go-waku does)")
	fs.Var(&o.contentTopics, "content-topic", "content topic (repeatable; filter and store use all, the others the first; \"\" = any for relay-receive)")
	fs.Float64Var(&o.timeout, "timeout", 60, "seconds allowed for the command's waiting steps (see README)")
	fs.StringVar(&o.prefix, "prefix", "", "payload prefix: payload = <prefix>-<index> (default random)")
	fs.StringVar(&o.logLevel, "log-level", "warn", "stderr log level: debug, info, warn, error")

	fs.Float64Var(&o.seconds, "seconds", 10, "stay/filter: how long to stay connected / subscribed; relay-publish: publish for this long (then --count, if given, is a maximum)")
	fs.IntVar(&o.count, "count", 1, "messages to publish / push / receive (default 1; filter: stop early after N distinct pushes, default 0 = never)")
	fs.Float64Var(&o.rate, "rate", 0, "relay-publish/lightpush: messages per second, 0 = as fast as possible; store-bench: pages per second, open loop (0 = closed loop)")
	fs.IntVar(&o.payloadSize, "payload-size", 0, "relay-publish/lightpush: pad each payload to this many bytes")
	fs.BoolVar(&o.quiet, "quiet", false, "relay-publish/relay-receive/lightpush: no event line per message")
	fs.Float64Var(&o.linger, "linger", 2, "relay-publish: seconds to stay connected after the last publish (lets gossipsub flush its queue)")
	fs.Float64Var(&o.meshWait, "mesh-wait", 10, "relay-*: after the bridge is a topic peer, seconds to wait for it to be in our mesh too (not required)")
	fs.IntVar(&o.validateQ, "validate-queue-size", 0, "relay-*: gossipsub validation queue size, 0 = go-libp2p-pubsub default (32)")

	fs.Float64Var(&o.pingEvery, "ping-every", 5, "filter: seconds between pings")
	fs.Float64Var(&o.pushRate, "push-rate", 15, "filter: go-waku's per-peer limit on incoming pushes, msgs/s (go-waku default 15; 0 = unlimited)")
	fs.IntVar(&o.pushBurst, "push-burst", 20, "filter: burst of that limit (go-waku default 20)")

	fs.Uint64Var(&o.pageSize, "page-size", 20, "store: page size (go-waku caps it at 100; 0 = go-waku default 20)")
	fs.BoolVar(&o.forward, "forward", false, "store: paginate forward (default backward)")
	fs.StringVar(&o.hashes, "hashes", "", "store: comma-separated 0x-hex message hashes: a message-hash lookup")
	fs.BoolVar(&o.includeData, "include-data", true, "store: include_data")
	fs.Int64Var(&o.startNs, "start-ns", 0, "store: time_start (ns, 0 = unset)")
	fs.Int64Var(&o.endNs, "end-ns", 0, "store: time_end (ns, 0 = unset)")
	fs.BoolVar(&o.skipRateLimit, "skip-ratelimit", false, "store: skip go-waku's client-side limit of 8 requests/s per peer")
	fs.StringVar(&o.benchPubsub, "pubsub-topics", "", "store-bench: comma-separated pubsub topics to query (default --pubsub-topic)")
	fs.Int64Var(&o.seed, "seed", 1, "store-bench: seed of the random queries")
	fs.BoolVar(&o.times, "times", false, "store-bench: the summary holds each page's due time (starts_unix_ms)")
	fs.StringVar(&o.plan, "plan", "", "store-bench: page these queries in turn (a JSON object a line: pubsub_topic, content_topics, start_ns, end_ns, forward, page_size, include_data, hashes) instead of random ones")
	fs.IntVar(&o.clients, "clients", 20, "filter-many: filter light clients, each its own node")
	fs.Float64Var(&o.connRate, "connect-rate", 0, "filter-many: clients started (dial, subscribe) per second; 0: all at once")
	fs.BoolVar(&o.keepStream, "keep-streams", false, "filter-many: each client reads every push of a push stream until the service ends it, as nwaku's and js-waku's clients do (default: go-waku's light client, one push a stream)")
	fs.Float64Var(&o.intervalMs, "interval-ms", 20, "store-probe: milliseconds between the starts of two queries")
	fs.BoolVar(&o.legacy, "legacy", false, "store-bench, store-probe: query with the legacy store protocol (go-waku's own node serves only that one)")
	fs.BoolVar(&o.rotateCT, "rotate-content-topics", false, "relay-publish: message i on content topic i mod the number of --content-topic")

	fs.StringVar(&o.enr, "enr", "", "enr-decode: the record, enr:...")

	if err := fs.Parse(args[1:]); err != nil {
		return nil, err
	}
	o.set = map[string]bool{}
	fs.Visit(func(f *flag.Flag) { o.set[f.Name] = true })
	if o.command == "filter" && !o.set["count"] {
		o.count = 0 // filter: no early stop unless asked
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments: %v", fs.Args())
	}
	if o.peer == "" && o.command != "enr-decode" && o.command != "serve" {
		return nil, fmt.Errorf("--peer is required")
	}
	if o.clusterID > 0xffff {
		return nil, fmt.Errorf("--cluster-id out of range")
	}
	if o.prefix == "" {
		b := make([]byte, 4)
		_, _ = rand.Read(b)
		o.prefix = hex.EncodeToString(b)
	}
	if o.timeout <= 0 {
		return nil, fmt.Errorf("--timeout must be > 0")
	}
	if o.pubsubTopic == "" {
		// what go-waku does with an empty pubsub topic: autosharding (cluster 1, 8 shards)
		t, err := wprotocol.GetPubSubTopicFromContentTopic(o.contentTopic())
		if err != nil {
			return nil, fmt.Errorf("--pubsub-topic \"\": cannot autoshard content topic %q: %v", o.contentTopic(), err)
		}
		o.pubsubTopic = t
		o.autosharded = true
	}
	if _, ok := staticShard(o.pubsubTopic, uint16(o.clusterID)); !ok && o.clusterID != 0 {
		return nil, fmt.Errorf("with --cluster-id %d, --pubsub-topic must be /waku/2/rs/%d/<shard> (got %q): "+
			"go-waku v0.10.0 with a cluster id and no shard puts an empty shard list in its ENR, "+
			"and its metadata protocol then drops every peer (\"invalid shard count\")", o.clusterID, o.clusterID, o.pubsubTopic)
	}
	if o.count < 0 {
		return nil, fmt.Errorf("--count must be >= 0")
	}
	return o, nil
}

func parseLevel(s string) zapcore.Level {
	var l zapcore.Level
	if err := l.UnmarshalText([]byte(s)); err != nil {
		return zapcore.WarnLevel
	}
	return l
}

func main() {
	// go-waku's dnsdisc package init() calls utils.Logger(), which configures the
	// global go-log (libp2p's logger) to write to STDOUT. Point it at stderr before
	// anything logs; node.WithLogger later replaces its core with ours (stderr) too.
	cfg := logging.GetConfig()
	cfg.Stdout = false
	cfg.Stderr = true
	cfg.Format = logging.PlaintextOutput
	cfg.Level = logging.LevelWarn
	logging.SetupLogging(cfg)

	o, err := parseArgs(os.Args[1:])
	if err != nil {
		cmd := ""
		if len(os.Args) > 1 {
			cmd = os.Args[1]
		}
		if err == flag.ErrHelp {
			os.Exit(0)
		}
		fmt.Fprintln(os.Stderr, "error:", err)
		summary(cmd, false, "usage: "+firstLine(err.Error()), nil)
		os.Exit(2)
	}

	level := parseLevel(o.logLevel)
	cfg.Level = logging.LogLevel(level)
	logging.SetupLogging(cfg)
	logger := newLogger(level)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	var interrupted atomic.Bool
	go func() {
		<-sigs
		interrupted.Store(true)
		fmt.Fprintln(os.Stderr, "signal received: finishing")
		cancel()
	}()

	hub.sink = func(c captured) {
		switch c.Message {
		case "Failed to subscribe", "could not publish message":
			return // reported by the command itself
		}
		f := obj{"msg": c.Message}
		if c.Err != nil {
			f["error"] = c.Err.Error()
		}
		if p, ok := c.Fields["peerID"]; ok {
			f["peer"] = p
		} else if p, ok := c.Fields["peer"]; ok {
			f["peer"] = p
		}
		event("gowaku_log", f)
	}

	var res result
	switch o.command {
	case "stay":
		res = cmdStay(ctx, o, logger)
	case "relay-publish":
		res = cmdRelayPublish(ctx, o, logger)
	case "relay-receive":
		res = cmdRelayReceive(ctx, o, logger)
	case "filter":
		res = cmdFilter(ctx, o, logger)
	case "store":
		res = cmdStore(ctx, o, logger)
	case "lightpush":
		res = cmdLightpush(ctx, o, logger)
	case "store-bench":
		res = cmdStoreBench(ctx, o, logger)
	case "filter-many":
		res = cmdFilterMany(ctx, o, logger)
	case "store-probe":
		res = cmdStoreProbe(ctx, o, logger)
	case "enr-decode":
		res = cmdEnrDecode(o)
	case "serve":
		res = cmdServe(ctx, o, logger)
	case "px":
		res = cmdPx(ctx, o, logger)
	}
	if res.fields == nil {
		res.fields = obj{}
	}
	if interrupted.Load() {
		res.fields["interrupted"] = true
	}
	summary(o.command, res.err == "", res.err, res.fields)
	_ = logger.Sync()
	if res.err != "" {
		os.Exit(1)
	}
}

type result struct {
	err    string
	fields obj
}

func fail(fields obj, format string, a ...any) result {
	if fields == nil {
		fields = obj{}
	}
	return result{err: fmt.Sprintf(format, a...), fields: fields}
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}
