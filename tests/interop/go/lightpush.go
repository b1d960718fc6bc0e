package main

import (
	"context"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/waku-org/go-waku/waku/v2/protocol/lightpush"
)

// go-waku v0.10.0 implements lightpush only as /vac/waku/lightpush/2.0.0-beta1
// (PushRPC with PushResponse{is_success, info}): there are no numeric status codes.
// A status is "OK", or the error: the response's info text ("lightpush error<info>"
// is how go-waku returns it) or the stream error go-waku only logs.

func cmdLightpush(ctx context.Context, o *options, log *zap.Logger) result {
	deadline := time.Now().Add(o.timeoutDur())
	s, err := newSession(ctx, o, log, nodeConfig{relay: false})
	if err != nil {
		return fail(nil, "%v", err)
	}
	defer s.stop()
	proto := string(lightpush.LightPushID_v20beta1)
	statuses := []string{}
	hashes := []string{}
	latencies := []float64{} // ms from when each push was due (--rate: open loop, no coordinated omission) to its answer
	ok := 0
	p := pacer{start: time.Now(), rate: o.rate}
	fields := func() obj {
		f := s.connFields(nil)
		f["protocol"] = proto
		f["bridge_supports_protocol"] = s.supports(proto)
		f["pushed_ok"] = ok
		f["statuses"] = statuses
		f["hashes"] = hashes
		f["latencies_ms"] = latencies
		f["start_unix_ms"] = p.start.UnixMilli() // push i was due at start + i / --rate
		f["prefix"] = o.prefix
		return f
	}
	if err := s.connect(ctx, deadline); err != nil {
		return fail(fields(), "%v", err)
	}
	lp := s.node.Lightpush()
	p.start = time.Now() // after connecting: push i is due at start + i / --rate
	for i := 0; i < o.count && ctx.Err() == nil; i++ {
		p.wait(ctx, i)
		due := p.due(i)
		msg := makeMessage(o.prefix, i, o.payloadSize, o.contentTopic())
		want := msg.Hash(o.pubsubTopic).String()
		hub.take("could not publish message")
		h, err := lp.Publish(ctx, msg, lightpush.WithPeer(s.peerID), lightpush.WithPubSubTopic(o.pubsubTopic))
		status := "OK"
		if err != nil {
			status = err.Error()
			if strings.HasPrefix(status, "lightpush error") {
				info := strings.TrimPrefix(status, "lightpush error")
				if c, found := hub.take("could not publish message"); found && c.Err != nil {
					status = "error: " + c.Err.Error()
				} else if info != "" {
					status = "rejected: " + info
				} else {
					status = "rejected"
				}
			}
		} else {
			ok++
			if h.String() != want {
				status = "OK (hash differs: " + h.String() + ")"
			}
		}
		statuses = append(statuses, status)
		hashes = append(hashes, want)
		latencies = append(latencies, float64(time.Since(due).Microseconds())/1000)
		if !o.quiet {
			event("lightpush", obj{"index": i, "hash": want, "ok": err == nil, "status": status,
				"payload": payloadText(msg.Payload)})
		}
	}
	f := fields()
	if ok < o.count {
		first := ""
		for _, st := range statuses {
			if !strings.HasPrefix(st, "OK") {
				first = st
				break
			}
		}
		return fail(f, "%d of %d lightpush requests succeeded (first failure: %s)", ok, o.count, first)
	}
	return result{fields: f}
}
