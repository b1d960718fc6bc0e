package main

import (
	"context"
	"net/http"
	"sync"
	"time"

	"go.uber.org/zap"
	"golang.org/x/time/rate"

	"github.com/waku-org/go-waku/waku/v2/onlinechecker"
	wprotocol "github.com/waku-org/go-waku/waku/v2/protocol"
	"github.com/waku-org/go-waku/waku/v2/protocol/filter"
)

// filterStatus turns the outcome of a go-waku filter request into the status code the
// service node returned: nil error = 200 (go-waku only returns nil for 200), a
// *filter.FilterError carries the code; anything else (stream/dial error) has no code.
func filterStatus(err error) (any, any) {
	if err == nil {
		return http.StatusOK, nil
	}
	if fe, ok := asType[*filter.FilterError](err); ok {
		return fe.Code, fe.Message
	}
	return nil, err.Error()
}

func cmdFilter(ctx context.Context, o *options, log *zap.Logger) result {
	deadline := time.Now().Add(o.timeoutDur())
	s, err := newSession(ctx, o, log, nodeConfig{relay: false})
	if err != nil {
		return fail(nil, "%v", err)
	}
	defer s.stop()

	// Our own WakuFilterLightNode on the node's host, instead of node.WithWakuFilterLightNode():
	// the same go-waku code, but node.New gives no way to set the light node's limit on
	// incoming pushes (15/s, burst 20 per peer; pushes above it are reset and lost).
	limit := rate.Limit(o.pushRate)
	if o.pushRate <= 0 {
		limit = rate.Inf
	}
	ln := filter.NewWakuFilterLightNode(s.node.Broadcaster(), s.node.PeerManager(), s.node.Timesource(),
		onlinechecker.NewDefaultOnlineChecker(true), s.reg, log, filter.WithLightNodeRateLimiter(limit, o.pushBurst))
	ln.SetHost(s.node.Host())
	if err := ln.Start(ctx); err != nil {
		return fail(s.connFields(nil), "filter light node start: %v", err)
	}
	defer ln.Stop()

	var mu sync.Mutex
	pushes, duplicates := 0, 0
	seen := map[string]bool{}
	hashes := []string{}
	pingStatuses := []any{}
	var subStatus, unsubStatus, finalPingStatus any
	fields := func() obj {
		mu.Lock()
		defer mu.Unlock()
		f := s.connFields(nil)
		f["subscribe_status"] = subStatus
		f["pings"] = len(pingStatuses)
		f["ping_statuses"] = append([]any{}, pingStatuses...)
		f["pushes"] = pushes
		f["received"] = len(hashes)
		f["duplicates"] = duplicates
		f["hashes"] = append([]string{}, hashes...)
		f["unsubscribe_status"] = unsubStatus
		f["final_ping_status"] = finalPingStatus
		f["gowaku_filter_errors"] = s.counterValues("waku_filter_errors", "error_type")
		return f
	}

	if err := s.connect(ctx, deadline); err != nil {
		return fail(fields(), "%v", err)
	}

	cf := wprotocol.NewContentFilter(o.pubsubTopic, o.contentTopics.vals...)
	sctx, cancel := context.WithDeadline(ctx, deadline)
	subs, err := ln.Subscribe(sctx, cf, filter.WithPeer(s.peerID))
	cancel()
	if err != nil || len(subs) == 0 {
		// go-waku's Subscribe returns a generic error and only logs the FilterError
		// holding the service node's code: take it from the captured log entry.
		var code, desc any
		if c, ok := hub.take("Failed to subscribe"); ok {
			code, desc = filterStatus(c.Err)
		}
		if err == nil {
			err = context.DeadlineExceeded
		}
		mu.Lock()
		subStatus = code
		mu.Unlock()
		event("subscribe", obj{"status": code, "desc": desc, "error": err.Error()})
		return fail(fields(), "filter subscribe failed: status=%v %v (%v)", code, desc, err)
	}
	mu.Lock()
	subStatus = http.StatusOK
	mu.Unlock()
	event("subscribe", obj{"status": http.StatusOK, "content_topics": o.contentTopics.vals})
	event("ready", nil)

	enough := make(chan struct{})
	var enoughOnce sync.Once
	for _, sub := range subs {
		go func() {
			for env := range sub.C {
				m := env.Message()
				h := env.Hash().String()
				mu.Lock()
				pushes++
				dup := seen[h]
				if dup {
					duplicates++
				} else {
					seen[h] = true
					hashes = append(hashes, h)
				}
				n := len(hashes)
				mu.Unlock()
				event("push", obj{"hash": h, "payload": payloadText(m.Payload), "payload_hex": hexs(m.Payload),
					"content_topic": m.ContentTopic, "pubsub_topic": env.PubsubTopic(), "timestamp": m.GetTimestamp(),
					"duplicate": dup})
				if o.count > 0 && n >= o.count {
					enoughOnce.Do(func() { close(enough) })
				}
			}
		}()
	}

	ping := func() (any, any) {
		pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		return filterStatus(ln.Ping(pctx, s.peerID))
	}

	pingOK := true
	end := time.Now().Add(time.Duration(o.seconds * float64(time.Second)))
	every := time.Duration(o.pingEvery * float64(time.Second))
	if every <= 0 {
		every = 5 * time.Second
	}
	t := time.NewTicker(every)
	stopEarly := false
loop:
	for time.Now().Before(end) {
		select {
		case <-ctx.Done():
			break loop
		case <-enough:
			stopEarly = true
			break loop
		case <-time.After(time.Until(end)):
			break loop
		case <-t.C:
			code, desc := ping()
			mu.Lock()
			pingStatuses = append(pingStatuses, code)
			mu.Unlock()
			if code != http.StatusOK {
				pingOK = false
			}
			event("ping", obj{"status": code, "desc": desc})
		}
	}
	t.Stop()

	uctx, ucancel := context.WithTimeout(context.Background(), 10*time.Second)
	res, err := ln.Unsubscribe(uctx, cf, filter.WithPeer(s.peerID))
	ucancel()
	var ucode, udesc any
	if err != nil {
		ucode, udesc = nil, err.Error()
	} else {
		errs := res.Errors()
		ucode, udesc = nil, "no result for the bridge"
		for _, e := range errs {
			if e.PeerID == s.peerID || e.PeerID == "" {
				ucode, udesc = filterStatus(e.Err)
			}
		}
	}
	mu.Lock()
	unsubStatus = ucode
	mu.Unlock()
	event("unsubscribe", obj{"status": ucode, "desc": udesc})

	// one more ping: the bridge no longer has a subscription for us (expected 404)
	fcode, fdesc := func() (any, any) {
		pctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		return filterStatus(ln.Ping(pctx, s.peerID))
	}()
	mu.Lock()
	finalPingStatus = fcode
	mu.Unlock()
	event("ping", obj{"status": fcode, "desc": fdesc, "after_unsubscribe": true})

	f := fields()
	f["stopped_early"] = stopEarly
	switch {
	case !pingOK:
		return fail(f, "a ping during the subscription did not return 200")
	case ucode != http.StatusOK:
		return fail(f, "unsubscribe returned %v %v", ucode, udesc)
	case o.count > 0 && f["received"].(int) < o.count && ctx.Err() == nil:
		// --count given: the pushes are part of the command's own steps
		return fail(f, "received %d of %d pushes", f["received"].(int), o.count)
	}
	return result{fields: f}
}
