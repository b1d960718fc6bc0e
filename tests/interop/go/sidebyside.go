package main

// Commands of tests/benchmarks/side_by_side.py: many filter light clients in one process
// (filter-many) and a store prober that tells when each message first comes back from a
// store query (store-probe). Both work against any Waku service node: go-waku's own
// (legacy store, --legacy) or ours.

import (
	"context"
	mrand "math/rand"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-msgio/pbio"
	"go.uber.org/zap"
	"golang.org/x/time/rate"
	"google.golang.org/protobuf/proto"

	"github.com/waku-org/go-waku/waku/v2/onlinechecker"
	wprotocol "github.com/waku-org/go-waku/waku/v2/protocol"
	"github.com/waku-org/go-waku/waku/v2/protocol/filter"
	filterpb "github.com/waku-org/go-waku/waku/v2/protocol/filter/pb"
	"github.com/waku-org/go-waku/waku/v2/protocol/legacy_store"
	wpb "github.com/waku-org/go-waku/waku/v2/protocol/pb"
	"github.com/waku-org/go-waku/waku/v2/protocol/store"
	"github.com/waku-org/go-waku/waku/v2/protocol/subscription"
)

// cmdFilterMany runs --clients go-waku filter light clients, each its own node (own host,
// own connection), client j subscribed to content topic j mod len(--content-topic) (so with
// fewer topics than clients, each message is pushed to clients/topics of them: the fan-out).
// Emits {"event":"ready"} once every client is subscribed, stays --seconds, and reports every
// push a client received once as [hash, message timestamp ns, receipt time ns, client]
// ("receipts"; "duplicates": the same message again at the same client).
//
// Pushes are read by go-waku's light client (one push a stream, then it closes the stream), or
// with --keep-streams as nwaku's and js-waku's clients read them: every push of a stream, until
// the service node ends it (the handler of the push protocol replaced on each client's host;
// subscribe, ping and unsubscribe stay go-waku's).
func cmdFilterMany(ctx context.Context, o *options, log *zap.Logger) result {
	deadline := time.Now().Add(o.timeoutDur())
	limit := rate.Limit(o.pushRate)
	if o.pushRate <= 0 {
		limit = rate.Inf
	}
	type client struct {
		s  *session
		ln *filter.WakuFilterLightNode
		cf wprotocol.ContentFilter
	}
	var mu sync.Mutex
	receipts := make([][4]any, 0, 1<<14)
	pushes, duplicates, retries := 0, 0, 0
	type got struct {
		hash   string
		client int
	}
	seen := map[got]bool{}
	record := func(j int, h string, ts int64) {
		now := time.Now().UnixNano()
		mu.Lock()
		pushes++
		if seen[got{h, j}] {
			duplicates++
		} else {
			seen[got{h, j}] = true
			receipts = append(receipts, [4]any{h, ts, now, j})
		}
		mu.Unlock()
	}
	clients := make([]*client, o.clients)
	errs := make([]string, o.clients)
	var wg sync.WaitGroup
	began := time.Now()
	for j := 0; j < o.clients; j++ {
		if o.connRate > 0 { // client j starts j / rate s in (a light client population, not one instant)
			time.Sleep(time.Until(began.Add(time.Duration(float64(j) / o.connRate * float64(time.Second)))))
		}
		wg.Add(1)
		go func(j int) {
			defer wg.Done()
			s, err := newSession(ctx, o, log, nodeConfig{relay: false})
			if err != nil {
				errs[j] = err.Error()
				return
			}
			ln := filter.NewWakuFilterLightNode(s.node.Broadcaster(), s.node.PeerManager(), s.node.Timesource(),
				onlinechecker.NewDefaultOnlineChecker(true), s.reg, log, filter.WithLightNodeRateLimiter(limit, o.pushBurst))
			ln.SetHost(s.node.Host())
			c := &client{s: s, ln: ln}
			clients[j] = c
			if err := ln.Start(ctx); err != nil {
				errs[j] = "light node start: " + err.Error()
				return
			}
			if o.keepStream {
				s.node.Host().SetStreamHandler(filter.FilterPushID_v20beta1, keptPushReader(j, record))
			}
			if err := s.connect(ctx, deadline); err != nil {
				errs[j] = err.Error()
				return
			}
			ct := o.contentTopics.vals[j%len(o.contentTopics.vals)]
			c.cf = wprotocol.NewContentFilter(o.pubsubTopic, ct)
			// A failed subscribe is tried again, up to 3 times a second apart (as apps on go-waku's
			// filter API do); each retry is counted (subscribe_retries).
			var subs []*subscription.SubscriptionDetails
			for attempt := 0; attempt < 3; attempt++ {
				if attempt > 0 {
					mu.Lock()
					retries++
					mu.Unlock()
					time.Sleep(time.Second)
					if !s.isConnected() {
						if err := s.connect(ctx, deadline); err != nil {
							continue
						}
					}
				}
				sctx, cancel := context.WithDeadline(ctx, deadline)
				subs, err = ln.Subscribe(sctx, c.cf, filter.WithPeer(s.peerID))
				cancel()
				if err == nil && len(subs) > 0 {
					break
				}
			}
			if err != nil || len(subs) == 0 {
				errs[j] = "subscribe failed"
				return
			}
			for _, sub := range subs {
				go func() {
					for env := range sub.C {
						record(j, env.Hash().String(), env.Message().GetTimestamp())
					}
				}()
			}
		}(j)
	}
	wg.Wait()
	defer func() {
		// unsubscribe first, each with a context of its own (the light node's Stop unsubscribes
		// with its own context, cancelled meanwhile: a service node would keep the subscriptions)
		var uwg sync.WaitGroup
		for _, c := range clients {
			if c != nil && c.cf.PubsubTopic != "" {
				uwg.Add(1)
				go func(c *client) {
					defer uwg.Done()
					// go-waku's node answers 429 to many requests at once: tried again for 20 s
					for end := time.Now().Add(20 * time.Second); time.Now().Before(end); {
						uctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
						res, err := c.ln.Unsubscribe(uctx, c.cf, filter.WithPeer(c.s.peerID))
						cancel()
						if err == nil && (res == nil || len(res.Errors()) == 0) {
							return
						}
						time.Sleep(time.Duration(200+mrand.Intn(800)) * time.Millisecond)
					}
				}(c)
			}
		}
		uwg.Wait()
		for _, c := range clients {
			if c != nil {
				c.ln.Stop()
				c.s.stop()
			}
		}
	}()
	failed := 0
	firstErr := ""
	for _, e := range errs {
		if e != "" {
			failed++
			if firstErr == "" {
				firstErr = e
			}
		}
	}
	fields := func() obj {
		mu.Lock()
		defer mu.Unlock()
		connected := 0
		for _, c := range clients {
			if c != nil && c.s.isConnected() {
				connected++
			}
		}
		return obj{"clients": o.clients, "failed_clients": failed, "connected_at_end": connected,
			"pushes": pushes, "duplicates": duplicates, "received": len(receipts),
			"keep_streams": o.keepStream, "subscribe_retries": retries, "receipts": append([][4]any{}, receipts...)}
	}
	if failed > 0 {
		return fail(fields(), "%d of %d clients failed (first: %s)", failed, o.clients, firstErr)
	}
	event("ready", obj{"clients": o.clients})
	select {
	case <-ctx.Done():
	case <-time.After(time.Duration(o.seconds * float64(time.Second))):
	}
	return result{fields: fields()}
}

// cmdStoreProbe queries the node's store every --interval-ms for the newest messages
// (backward, pages of 100, --content-topic, the last 30 s), following the cursor to older pages
// until a page holds a message seen before (so a burst stored at once is read whole), for
// --seconds, and reports when each message first came back: [hash, message timestamp ns, first
// seen ns] ("seen"), with every page's latency (ms). --legacy: go-waku's legacy store protocol
// (go-waku's own node serves only that one), else store v3.
func cmdStoreProbe(ctx context.Context, o *options, log *zap.Logger) result {
	deadline := time.Now().Add(o.timeoutDur())
	s, err := newSession(ctx, o, log, nodeConfig{relay: false})
	if err != nil {
		return fail(nil, "%v", err)
	}
	defer s.stop()
	if err := s.connect(ctx, deadline); err != nil {
		return fail(s.connFields(nil), "%v", err)
	}
	seenAt := map[string]bool{}
	seen := make([][3]any, 0, 1<<14)
	latencies := make([]float64, 0, 4096)
	queries, errors := 0, 0
	lastErr := ""
	// page i of the walk (0: the newest); more: there is an older page
	var lres *legacy_store.Result
	var vres store.Result
	page := func(i int) (msgs []*wpb.WakuMessage, more bool, err error) {
		qctx, cancel := context.WithTimeout(ctx, o.timeoutDur())
		defer cancel()
		from := proto.Int64(time.Now().Add(-30 * time.Second).UnixNano())
		if o.legacy {
			if i == 0 {
				lres, err = s.node.LegacyStore().Query(qctx, legacy_store.Query{PubsubTopic: o.pubsubTopic,
					ContentTopics: o.contentTopics.vals, StartTime: from},
					legacy_store.WithPeer(s.peerID), legacy_store.WithPaging(false, 100))
			} else {
				lres, err = s.node.LegacyStore().Next(qctx, lres)
			}
			if err != nil {
				return nil, false, err
			}
			return lres.Messages, lres.Cursor() != nil, nil
		}
		if i == 0 {
			vres, err = s.node.Store().Request(qctx, store.FilterCriteria{
				ContentFilter: wprotocol.NewContentFilter(o.pubsubTopic, o.contentTopics.vals...), TimeStart: from},
				store.WithPeer(s.peerID), store.WithPaging(false, 100), store.IncludeData(true), store.SkipRateLimit())
		} else {
			err = vres.Next(qctx, store.SkipRateLimit())
		}
		if err != nil {
			return nil, false, err
		}
		out := make([]*wpb.WakuMessage, 0, len(vres.Messages()))
		for _, m := range vres.Messages() {
			out = append(out, m.Message)
		}
		return out, vres.Cursor() != nil, nil
	}
	event("ready", obj{})
	every := time.Duration(o.intervalMs * float64(time.Millisecond))
	end := time.Now().Add(time.Duration(o.seconds * float64(time.Second)))
	for time.Now().Before(end) && ctx.Err() == nil {
		began := time.Now()
		for i := 0; i < 100; i++ {
			t0 := time.Now()
			msgs, more, err := page(i)
			now := time.Now()
			queries++
			if err != nil {
				errors++
				lastErr = err.Error()
				break
			}
			latencies = append(latencies, float64(now.Sub(t0).Microseconds())/1000)
			caughtUp := false
			for _, m := range msgs {
				h := m.Hash(o.pubsubTopic).String()
				if seenAt[h] {
					caughtUp = true
				} else {
					seenAt[h] = true
					seen = append(seen, [3]any{h, m.GetTimestamp(), now.UnixNano()})
				}
			}
			if caughtUp || !more {
				break
			}
		}
		if wait := every - time.Since(began); wait > 0 {
			time.Sleep(wait)
		}
	}
	f := s.connFields(nil)
	f["queries"] = queries
	f["errors"] = errors
	f["last_error"] = lastErr
	f["latencies_ms"] = latencies
	f["seen"] = seen
	return result{fields: f}
}

// keptPushReader reads pushes as nwaku's filter client does (waku_filter_v2/client.nim: readLp
// until the stream ends) and js-waku's (it reads the push stream to its end): every
// length-prefixed MessagePush of the stream, each recorded on arrival, until the service node
// closes or resets it.
func keptPushReader(j int, record func(int, string, int64)) network.StreamHandler {
	return func(st network.Stream) {
		defer st.Close()
		r := pbio.NewDelimitedReader(st, 10<<20)
		for {
			push := &filterpb.MessagePush{}
			if err := r.ReadMsg(push); err != nil {
				return
			}
			m := push.GetWakuMessage()
			if m == nil {
				continue
			}
			record(j, m.Hash(push.GetPubsubTopic()).String(), m.GetTimestamp())
		}
	}
}
