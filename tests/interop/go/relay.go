package main

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	pubsub "github.com/libp2p/go-libp2p-pubsub"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"
	"go.uber.org/zap"

	wprotocol "github.com/waku-org/go-waku/waku/v2/protocol"
	"github.com/waku-org/go-waku/waku/v2/protocol/relay"
)

// relayTracer counts what gossipsub dropped, so that a lost message can be told apart
// from a bridge bug: validation-queue overflow on receive, outbound-queue overflow
// towards the bridge on publish, and mesh changes.
type relayTracer struct {
	peer peer.ID

	mu            sync.Mutex
	rejects       map[string]int64 // reason -> messages
	droppedToPeer atomic.Int64     // messages in RPCs to the bridge dropped (queue full)
	sentToPeer    atomic.Int64     // messages in RPCs queued for the bridge
	recvFromPeer  atomic.Int64     // messages in RPCs received from the bridge
	grafts        atomic.Int64
	prunes        atomic.Int64
	undeliverable atomic.Int64
}

func (t *relayTracer) AddPeer(p peer.ID, proto protocol.ID) {}
func (t *relayTracer) RemovePeer(p peer.ID)                 {}
func (t *relayTracer) Join(topic string)                    {}
func (t *relayTracer) Leave(topic string)                   {}
func (t *relayTracer) Graft(p peer.ID, topic string) {
	if p == t.peer {
		t.grafts.Add(1)
	}
}
func (t *relayTracer) Prune(p peer.ID, topic string) {
	if p == t.peer {
		t.prunes.Add(1)
		event("mesh_prune", obj{"topic": topic})
	}
}
func (t *relayTracer) ValidateMessage(msg *pubsub.Message) {}
func (t *relayTracer) DeliverMessage(msg *pubsub.Message)  {}
func (t *relayTracer) RejectMessage(msg *pubsub.Message, reason string) {
	if reason == pubsub.RejectSelfOrigin {
		return
	}
	t.mu.Lock()
	t.rejects[reason]++
	t.mu.Unlock()
}
func (t *relayTracer) DuplicateMessage(msg *pubsub.Message) {}
func (t *relayTracer) ThrottlePeer(p peer.ID)               {}
func (t *relayTracer) RecvRPC(rpc *pubsub.RPC) {
	t.recvFromPeer.Add(int64(len(rpc.GetPublish())))
}
func (t *relayTracer) SendRPC(rpc *pubsub.RPC, p peer.ID) {
	if p == t.peer {
		t.sentToPeer.Add(int64(len(rpc.GetPublish())))
	}
}
func (t *relayTracer) DropRPC(rpc *pubsub.RPC, p peer.ID) {
	if p == t.peer {
		t.droppedToPeer.Add(int64(len(rpc.GetPublish())))
	}
}
func (t *relayTracer) UndeliverableMessage(msg *pubsub.Message) { t.undeliverable.Add(1) }

func (t *relayTracer) fields() obj {
	t.mu.Lock()
	rej := map[string]int64{}
	for k, v := range t.rejects {
		rej[k] = v
	}
	t.mu.Unlock()
	return obj{
		"rejected":              rej,
		"dropped_to_bridge":     t.droppedToPeer.Load(),
		"queued_to_bridge":      t.sentToPeer.Load(),
		"received_rpc_messages": t.recvFromPeer.Load(),
		"undeliverable":         t.undeliverable.Load(),
		"grafts":                t.grafts.Load(),
		"prunes":                t.prunes.Load(),
	}
}

// ---- stay ----

func cmdStay(ctx context.Context, o *options, log *zap.Logger) result {
	s, err := newSession(ctx, o, log, nodeConfig{relay: true})
	if err != nil {
		return fail(nil, "%v", err)
	}
	defer s.stop()
	// joined (no consumer) to --pubsub-topic, as a relay node would be
	if _, err := s.node.Relay().Subscribe(ctx, wprotocol.NewContentFilter(o.pubsubTopic), relay.WithoutConsumer()); err != nil {
		return fail(s.connFields(nil), "relay subscribe %s: %v", o.pubsubTopic, err)
	}
	if err := s.connect(ctx, time.Now().Add(o.timeoutDur())); err != nil {
		return fail(s.connFields(nil), "%v", err)
	}
	ps := s.node.Relay().PubSub()
	topicPeerSeen, meshSeen := false, false
	checks, downChecks := 0, 0
	end := time.Now().Add(time.Duration(o.seconds * float64(time.Second)))
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for time.Now().Before(end) && ctx.Err() == nil {
		select {
		case <-ctx.Done():
		case <-t.C:
			checks++
			up := s.isConnected()
			if !up {
				downChecks++
			}
			for _, p := range ps.ListPeers(o.pubsubTopic) {
				if p == s.peerID {
					topicPeerSeen = true
				}
			}
			for _, p := range ps.MeshPeers(o.pubsubTopic) {
				if p == s.peerID {
					meshSeen = true
				}
			}
			event("check", obj{"connected": up})
		}
	}
	f := s.connFields(obj{"checks": checks, "down_checks": downChecks,
		"topic_peer_seen": topicPeerSeen, "mesh_peer_seen": meshSeen})
	s.mu.Lock()
	f["agent"] = s.agent
	s.mu.Unlock()
	if !s.isConnected() || s.disconnects.Load() > 0 {
		return fail(f, "the connection to the bridge did not stay up (connected_at_end=%v, disconnects=%d)",
			s.isConnected(), s.disconnects.Load())
	}
	return result{fields: f}
}

// ---- relay-publish ----

func cmdRelayPublish(ctx context.Context, o *options, log *zap.Logger) result {
	deadline := time.Now().Add(o.timeoutDur())
	s, err := newSession(ctx, o, log, nodeConfig{relay: true})
	if err != nil {
		return fail(nil, "%v", err)
	}
	defer s.stop()
	r := s.node.Relay()
	if _, err := r.Subscribe(ctx, wprotocol.NewContentFilter(o.pubsubTopic), relay.WithoutConsumer()); err != nil {
		return fail(s.connFields(nil), "relay subscribe %s: %v", o.pubsubTopic, err)
	}
	if err := s.connect(ctx, deadline); err != nil {
		return fail(s.connFields(nil), "%v", err)
	}
	inMesh, err := s.waitTopicPeer(ctx, o.pubsubTopic, deadline, time.Duration(o.meshWait*float64(time.Second)))
	if err != nil {
		return fail(s.connFields(s.tracer.fields()), "%v", err)
	}
	event("ready", obj{"in_mesh": inMesh})

	hashes := make([]string, 0, o.count)
	var errs []string
	p := pacer{start: time.Now(), rate: o.rate}
	// --seconds S: publish for S seconds (at most --count messages when --count is given too)
	timed := o.set["seconds"]
	stopAt := p.start.Add(time.Duration(o.seconds * float64(time.Second)))
	for i := 0; (i < o.count || (timed && !o.set["count"])) && ctx.Err() == nil; i++ {
		if timed && !time.Now().Before(stopAt) {
			break
		}
		p.wait(ctx, i)
		ct := o.contentTopic()
		if o.rotateCT {
			ct = o.contentTopics.vals[i%len(o.contentTopics.vals)]
		}
		msg := makeMessage(o.prefix, i, o.payloadSize, ct)
		h, err := r.Publish(ctx, msg, relay.WithPubSubTopic(o.pubsubTopic))
		if err != nil {
			errs = append(errs, err.Error())
			if !o.quiet {
				event("publish_error", obj{"index": i, "error": err.Error()})
			}
			continue
		}
		if h != msg.Hash(o.pubsubTopic) { // cannot happen; guards the hash we report
			errs = append(errs, "publish hash differs from msg.Hash")
		}
		hashes = append(hashes, h.String())
		if !o.quiet {
			event("publish", obj{"index": i, "hash": h.String(), "payload": payloadText(msg.Payload), "timestamp": msg.GetTimestamp()})
		}
	}
	publishedAt := time.Now()
	// let gossipsub write its queue to the bridge before the node stops
	select {
	case <-ctx.Done():
	case <-time.After(time.Duration(o.linger * float64(time.Second))):
	}
	f := s.connFields(s.tracer.fields())
	f["published"] = len(hashes)
	f["hashes"] = hashes
	f["publish_errors"] = len(errs)
	f["prefix"] = o.prefix
	f["publish_ms"] = publishedAt.Sub(p.start).Milliseconds()
	if len(errs) > 0 {
		return fail(f, "%d of %d publishes failed (first: %s)", len(errs), o.count, errs[0])
	}
	if len(hashes) < o.count && !timed {
		return fail(f, "interrupted after %d of %d messages", len(hashes), o.count)
	}
	if d := s.tracer.droppedToPeer.Load(); d > 0 {
		return fail(f, "gossipsub dropped %d messages to the bridge (outbound queue full); use --rate", d)
	}
	if !s.isConnected() {
		return fail(f, "the bridge disconnected before the end")
	}
	return result{fields: f}
}

// ---- relay-receive ----

func cmdRelayReceive(ctx context.Context, o *options, log *zap.Logger) result {
	deadline := time.Now().Add(o.timeoutDur())
	s, err := newSession(ctx, o, log, nodeConfig{relay: true})
	if err != nil {
		return fail(nil, "%v", err)
	}
	defer s.stop()
	r := s.node.Relay()
	var cts []string
	if ct := o.contentTopic(); ct != "" {
		cts = []string{ct}
	}
	subs, err := r.Subscribe(ctx, wprotocol.NewContentFilter(o.pubsubTopic, cts...))
	if err != nil || len(subs) == 0 {
		return fail(s.connFields(nil), "relay subscribe %s: %v", o.pubsubTopic, err)
	}
	sub := subs[0]

	seen := map[string]bool{}
	hashes := make([]string, 0, o.count)
	duplicates := 0
	var mu sync.Mutex
	done := make(chan struct{})
	go func() {
		defer close(done)
		for env := range sub.Ch {
			h := env.Hash().String()
			mu.Lock()
			dup := seen[h]
			if dup {
				duplicates++
			} else {
				seen[h] = true
				hashes = append(hashes, h)
			}
			n := len(hashes)
			mu.Unlock()
			if !o.quiet {
				m := env.Message()
				event("message", obj{"hash": h, "payload": payloadText(m.Payload), "payload_hex": hexs(m.Payload),
					"content_topic": m.ContentTopic, "timestamp": m.GetTimestamp(), "duplicate": dup})
			}
			if o.count > 0 && n >= o.count {
				return
			}
		}
	}()

	f := func() obj {
		mu.Lock()
		defer mu.Unlock()
		x := s.connFields(s.tracer.fields())
		x["received"] = len(hashes)
		x["duplicates"] = duplicates
		x["hashes"] = append([]string{}, hashes...)
		return x
	}
	if err := s.connect(ctx, deadline); err != nil {
		return fail(f(), "%v", err)
	}
	inMesh, err := s.waitTopicPeer(ctx, o.pubsubTopic, deadline, time.Duration(o.meshWait*float64(time.Second)))
	if err != nil {
		return fail(f(), "%v", err)
	}
	event("ready", obj{"in_mesh": inMesh})

	select {
	case <-done:
	case <-ctx.Done():
	case <-time.After(time.Until(deadline)):
	}
	res := f()
	if n := res["received"].(int); n < o.count {
		return fail(res, "received %d of %d messages before the timeout", n, o.count)
	}
	return result{fields: res}
}
