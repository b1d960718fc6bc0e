package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"math/rand"
	"os"
	"strings"
	"syscall"
	"time"

	"go.uber.org/zap"
	"google.golang.org/protobuf/proto"

	wprotocol "github.com/waku-org/go-waku/waku/v2/protocol"
	"github.com/waku-org/go-waku/waku/v2/protocol/legacy_store"
	wpb "github.com/waku-org/go-waku/waku/v2/protocol/pb"
	"github.com/waku-org/go-waku/waku/v2/protocol/store"
)

// cmdStoreBench is one load client of tests/benchmarks/store_query.py --client go: a go-waku
// node that connects, warms its connection with one query, emits {"event":"ready"}, waits
// for a line on stdin, then for --seconds pages store v3 queries the way apps do: a random
// query (one of --pubsub-topics; none, one or three content topics of the --content-topic
// list, the first the most popular: weight 1/(i+1); direction; page size 20 or 100; 80 % with
// a time window starting (forward) or ending (backward) at a random time in
// [--start-ns, --end-ns], else from the newest / oldest message), followed along its
// cursor for up to 10 pages. Every page is go-waku's own request: a new stream each.
// Closed loop by default (each page sent when the previous one is answered). With --rate R,
// open loop: pages are due at Poisson arrivals of R a second (their own seeded source), each
// the next page of the walk under way or the first of a new query; a page is sent when it is
// due or, when the previous answer came later, at once, and its latency counts from when it
// was due, so a client that falls behind is charged for the wait (no coordinated omission).
// The summary holds every page's latency (ms), pages, messages, errors, the process's CPU
// seconds during the run and, with --rate, how many pages were sent late and the largest lag.
func cmdStoreBench(ctx context.Context, o *options, log *zap.Logger) result {
	var topics []string
	for _, t := range strings.Split(o.benchPubsub, ",") {
		if t = strings.TrimSpace(t); t != "" {
			topics = append(topics, t)
		}
	}
	if len(topics) == 0 {
		topics = []string{o.pubsubTopic}
	}
	contents := o.contentTopics.vals
	weights := make([]float64, len(contents))
	total := 0.0
	for i := range contents {
		weights[i] = 1.0 / float64(i+1)
		total += weights[i]
	}
	rnd := rand.New(rand.NewSource(o.seed))
	pickContent := func() string {
		x := rnd.Float64() * total
		for i, w := range weights {
			if x < w {
				return contents[i]
			}
			x -= w
		}
		return contents[len(contents)-1]
	}

	type query struct {
		criteria    store.Criteria
		forward     bool
		size        uint64
		includeData bool
	}
	plan, err := loadPlan(o.plan)
	if err != nil {
		return fail(nil, "%v", err)
	}
	planned := 0
	randomQuery := func() query {
		if len(plan) > 0 { // --plan: its queries in turn, from the seed's place in it
			p := plan[(int(o.seed)+planned)%len(plan)]
			planned++
			q := query{forward: p.Forward, size: p.PageSize, includeData: p.IncludeData}
			if len(p.Hashes) > 0 {
				q.criteria = store.MessageHashCriteria{MessageHashes: p.hashes}
				return q
			}
			fc := store.FilterCriteria{ContentFilter: wprotocol.NewContentFilter(p.PubsubTopic, p.ContentTopics...)}
			if p.StartNs != nil {
				fc.TimeStart = proto.Int64(*p.StartNs)
			}
			if p.EndNs != nil {
				fc.TimeEnd = proto.Int64(*p.EndNs)
			}
			q.criteria = fc
			return q
		}
		var cts []string
		k := []int{0, 1, 1, 3}[rnd.Intn(4)]
		seen := map[string]bool{}
		for i := 0; i < k && len(contents) > 0; i++ {
			if c := pickContent(); !seen[c] {
				seen[c] = true
				cts = append(cts, c)
			}
		}
		q := query{forward: rnd.Float64() < 0.5, size: []uint64{20, 20, 100}[rnd.Intn(3)], includeData: true}
		fc := store.FilterCriteria{ContentFilter: wprotocol.NewContentFilter(topics[rnd.Intn(len(topics))], cts...)}
		if o.endNs > o.startNs && rnd.Float64() < 0.8 {
			at := o.startNs + rnd.Int63n(o.endNs-o.startNs)
			if q.forward {
				fc.TimeStart = proto.Int64(at)
			} else {
				fc.TimeEnd = proto.Int64(at)
			}
		}
		q.criteria = fc
		return q
	}

	deadline := time.Now().Add(o.timeoutDur())
	s, err := newSession(ctx, o, log, nodeConfig{relay: false})
	if err != nil {
		return fail(nil, "%v", err)
	}
	defer s.stop()
	if err := s.connect(ctx, deadline); err != nil {
		return fail(s.connFields(nil), "%v", err)
	}

	latencies := make([]float64, 0, 4096)
	var starts []float64 // --times: each page's due time, unix ms
	pages, messages, errors := 0, 0, 0
	var lastErr string
	request := func(q query, res store.Result) (store.Result, error) {
		rctx, cancel := context.WithTimeout(ctx, o.timeoutDur())
		defer cancel()
		if res != nil {
			return res, res.Next(rctx, store.SkipRateLimit())
		}
		return s.node.Store().Request(rctx, q.criteria, store.WithPeer(s.peerID),
			store.WithPaging(q.forward, q.size), store.IncludeData(q.includeData), store.SkipRateLimit())
	}
	// --legacy: the legacy store protocol (go-waku's own node serves only that one); a page is
	// fetched by `fetch`, which keeps the walk's cursor for either protocol
	var legacyRes *legacy_store.Result
	fetch := func(q query, res store.Result, first bool) (store.Result, int, bool, error) {
		if !o.legacy {
			next, err := request(q, res)
			if err != nil {
				return nil, 0, false, err
			}
			return next, len(next.Messages()), next.Cursor() != nil, nil
		}
		rctx, cancel := context.WithTimeout(ctx, o.timeoutDur())
		defer cancel()
		var err error
		if first {
			fc, ok := q.criteria.(store.FilterCriteria)
			if !ok {
				return nil, 0, false, fmt.Errorf("the legacy store has no hash lookups")
			}
			lq := legacy_store.Query{PubsubTopic: fc.PubsubTopic, ContentTopics: fc.ContentTopicsList(),
				StartTime: fc.TimeStart, EndTime: fc.TimeEnd}
			legacyRes, err = s.node.LegacyStore().Query(rctx, lq, legacy_store.WithPeer(s.peerID),
				legacy_store.WithPaging(q.forward, q.size))
		} else {
			legacyRes, err = s.node.LegacyStore().Next(rctx, legacyRes)
		}
		if err != nil {
			return nil, 0, false, err
		}
		return nil, len(legacyRes.Messages), legacyRes.Cursor() != nil, nil
	}
	if _, _, _, err := fetch(randomQuery(), nil, true); err != nil {
		return fail(s.connFields(nil), "warm-up query: %v", err)
	}
	event("ready", obj{})
	if _, err := bufio.NewReader(os.Stdin).ReadString('\n'); err != nil {
		return fail(s.connFields(nil), "stdin closed before the start")
	}

	cpu := func() float64 {
		var ru syscall.Rusage
		_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
		return float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e9
	}
	cpu0, t0 := cpu(), time.Now()
	end := t0.Add(time.Duration(o.seconds * float64(time.Second)))
	arrivals := rand.New(rand.NewSource(o.seed + 1_000_003))
	due := t0
	late, maxLag := 0, time.Duration(0)
	// when the next page is due (open loop), or now (closed loop)
	nextDue := func() time.Time {
		if o.rate <= 0 {
			return time.Now()
		}
		due = due.Add(time.Duration(arrivals.ExpFloat64() / o.rate * float64(time.Second)))
		if !due.Before(end) { // not in the run: wait for its end only
			time.Sleep(time.Until(end))
		} else if wait := time.Until(due); wait > 0 {
			time.Sleep(wait)
		} else if lag := -wait; lag > time.Millisecond {
			late++
			if lag > maxLag {
				maxLag = lag
			}
		}
		return due
	}
	for time.Now().Before(end) && ctx.Err() == nil {
		q := randomQuery()
		var res store.Result
		for i := 0; i < 10 && time.Now().Before(end); i++ {
			began := nextDue()
			if !began.Before(end) {
				break
			}
			next, n, more, err := fetch(q, res, i == 0)
			if err != nil {
				errors++
				lastErr = err.Error()
				break
			}
			latencies = append(latencies, float64(time.Since(began).Microseconds())/1000)
			if o.times {
				starts = append(starts, float64(began.UnixMicro())/1000)
			}
			pages++
			messages += n
			res = next
			if !more {
				break
			}
		}
	}
	f := s.connFields(nil)
	f["latencies_ms"] = latencies
	if o.times {
		f["starts_unix_ms"] = starts
	}
	f["pages"] = pages
	f["messages"] = messages
	f["errors"] = errors
	f["last_error"] = lastErr
	f["elapsed_s"] = time.Since(t0).Seconds()
	f["cpu_s"] = cpu() - cpu0
	if o.rate > 0 {
		f["rate"] = o.rate
		f["late"] = late
		f["max_lag_ms"] = float64(maxLag.Microseconds()) / 1000
	}
	return result{fields: f}
}

// planEntry is one line of a --plan file: a store v3 query, by content filter and time window
// or by message hashes (hex).
type planEntry struct {
	PubsubTopic   string   `json:"pubsub_topic"`
	ContentTopics []string `json:"content_topics"`
	StartNs       *int64   `json:"start_ns"`
	EndNs         *int64   `json:"end_ns"`
	Forward       bool     `json:"forward"`
	PageSize      uint64   `json:"page_size"`
	IncludeData   bool     `json:"include_data"`
	Hashes        []string `json:"hashes"`
	hashes        []wpb.MessageHash
}

func loadPlan(path string) ([]planEntry, error) {
	if path == "" {
		return nil, nil
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("--plan: %v", err)
	}
	defer f.Close()
	var plan []planEntry
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		if strings.TrimSpace(sc.Text()) == "" {
			continue
		}
		var p planEntry
		if err := json.Unmarshal(sc.Bytes(), &p); err != nil {
			return nil, fmt.Errorf("--plan line %d: %v", len(plan)+1, err)
		}
		if len(p.Hashes) > 0 {
			if p.hashes, err = parseHashes(strings.Join(p.Hashes, ",")); err != nil {
				return nil, fmt.Errorf("--plan line %d: %v", len(plan)+1, err)
			}
		}
		plan = append(plan, p)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("--plan: %v", err)
	}
	if len(plan) == 0 {
		return nil, fmt.Errorf("--plan %s: no queries", path)
	}
	return plan, nil
}
