package main

import (
	"context"
	"fmt"
	"net"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	pubsub "github.com/libp2p/go-libp2p-pubsub"
	levent "github.com/libp2p/go-libp2p/core/event"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/p2p/net/swarm"
	ma "github.com/multiformats/go-multiaddr"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"google.golang.org/protobuf/proto"

	"github.com/waku-org/go-waku/waku/v2/node"
	wprotocol "github.com/waku-org/go-waku/waku/v2/protocol"
	"github.com/waku-org/go-waku/waku/v2/protocol/pb"
)

// session is one go-waku node connected (or trying to connect) to the bridge.
type session struct {
	o      *options
	log    *zap.Logger
	node   *node.WakuNode
	reg    *prometheus.Registry
	tracer *relayTracer

	peerID   peer.ID
	peerAddr ma.Multiaddr

	connected   atomic.Bool
	stopping    atomic.Bool // our own shutdown: its disconnection is not reported
	connects    atomic.Int64
	disconnects atomic.Int64

	mu        sync.Mutex
	protocols []string // last non-empty protocol list of the bridge seen in the peerstore
	agent     string
}

type nodeConfig struct {
	relay bool
}

// newSession builds and starts a go-waku node listening on 127.0.0.1:0 (TCP only),
// without any discovery, and installs the connection watchers. It does not dial.
func newSession(ctx context.Context, o *options, logger *zap.Logger, nc nodeConfig) (*session, error) {
	addr, err := ma.NewMultiaddr(o.peer)
	if err != nil {
		return nil, fmt.Errorf("bad --peer: %w", err)
	}
	info, err := peer.AddrInfoFromP2pAddr(addr)
	if err != nil {
		return nil, fmt.Errorf("bad --peer (needs /p2p/ID): %w", err)
	}
	s := &session{o: o, log: logger, reg: prometheus.NewRegistry(), peerID: info.ID, peerAddr: addr}

	hostAddr := &net.TCPAddr{IP: net.ParseIP("127.0.0.1"), Port: 0}
	opts := []node.WakuNodeOption{
		node.WithLogger(logger),
		node.WithPrometheusRegisterer(s.reg),
		node.WithHostAddress(hostAddr),
		node.WithClusterID(uint16(o.clusterID)),
	}
	// Like cmd/waku: announce the shard of --pubsub-topic when it is a static-sharding
	// topic of our cluster (go-waku's metadata requests carry these shards).
	if shard, ok := staticShard(o.pubsubTopic, uint16(o.clusterID)); ok {
		opts = append(opts, node.WithShards([]uint16{shard}))
	}
	if nc.relay {
		s.tracer = &relayTracer{peer: info.ID, rejects: map[string]int64{}}
		psOpts := []pubsub.Option{pubsub.WithRawTracer(s.tracer)}
		if o.validateQ > 0 {
			psOpts = append(psOpts, pubsub.WithValidateQueueSize(o.validateQ))
		}
		// min 1 peer to publish: a publish with the bridge gone fails instead of
		// silently going nowhere.
		opts = append(opts, node.WithWakuRelayAndMinPeers(1, psOpts...))
	}
	n, err := node.New(opts...)
	if err != nil {
		return nil, fmt.Errorf("go-waku node.New: %w", err)
	}
	if err := n.Start(ctx); err != nil {
		return nil, fmt.Errorf("go-waku node.Start: %w", err)
	}
	s.node = n

	h := n.Host()
	h.Network().Notify(&network.NotifyBundle{
		ConnectedF: func(nw network.Network, c network.Conn) {
			if c.RemotePeer() != s.peerID {
				return
			}
			if !s.connected.Swap(true) {
				s.connects.Add(1)
			}
		},
		DisconnectedF: func(nw network.Network, c network.Conn) {
			if c.RemotePeer() != s.peerID {
				return
			}
			if s.stopping.Load() {
				return
			}
			if nw.Connectedness(s.peerID) != network.Connected && s.connected.Swap(false) {
				s.disconnects.Add(1)
				event("disconnected", obj{"peer": s.peerID.String()})
			}
		},
	})
	sub, err := h.EventBus().Subscribe([]any{new(levent.EvtPeerIdentificationCompleted), new(levent.EvtPeerProtocolsUpdated)})
	if err == nil {
		go func() {
			defer sub.Close()
			for {
				select {
				case <-ctx.Done():
					return
				case e, ok := <-sub.Out():
					if !ok {
						return
					}
					switch ev := e.(type) {
					case levent.EvtPeerIdentificationCompleted:
						if ev.Peer == s.peerID {
							s.snapshotProtocols()
						}
					case levent.EvtPeerProtocolsUpdated:
						if ev.Peer == s.peerID {
							s.snapshotProtocols()
						}
					}
				}
			}
		}()
	}
	return s, nil
}

func staticShard(topic string, cluster uint16) (uint16, bool) {
	var t wprotocol.StaticShardingPubsubTopic
	if !strings.HasPrefix(topic, wprotocol.StaticShardingPubsubTopicPrefix) {
		return 0, false
	}
	if err := t.Parse(topic); err != nil {
		return 0, false
	}
	if t.Cluster() != cluster {
		return 0, false
	}
	return t.Shard(), true
}

func (s *session) snapshotProtocols() {
	ps := s.node.Host().Peerstore()
	protos, err := ps.GetProtocols(s.peerID)
	if err != nil || len(protos) == 0 {
		return
	}
	list := make([]string, 0, len(protos))
	for _, p := range protos {
		list = append(list, string(p))
	}
	sort.Strings(list)
	s.mu.Lock()
	s.protocols = list
	if av, err := ps.Get(s.peerID, "AgentVersion"); err == nil {
		if a, ok := av.(string); ok {
			s.agent = a
		}
	}
	s.mu.Unlock()
}

func (s *session) peerProtocols() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string{}, s.protocols...)
}

func (s *session) supports(proto string) bool {
	for _, p := range s.peerProtocols() {
		if p == proto {
			return true
		}
	}
	return false
}

func (s *session) isConnected() bool {
	return s.node.Host().Network().Connectedness(s.peerID) == network.Connected
}

// connect dials the bridge, retrying dial failures until the deadline. Returns once
// libp2p identify has completed (go-libp2p's Connect waits for it).
func (s *session) connect(ctx context.Context, deadline time.Time) error {
	var lastErr error
	for {
		dctx, cancel := context.WithDeadline(ctx, deadline)
		err := s.node.DialPeerWithMultiAddress(dctx, s.peerAddr)
		cancel()
		if err == nil {
			s.snapshotProtocols()
			s.mu.Lock()
			agent := s.agent
			s.mu.Unlock()
			event("connected", obj{"peer": s.peerID.String(), "protocols": s.peerProtocols(), "agent": agent,
				"listen": addrStrings(s.node.ListenAddresses())})
			return nil
		}
		lastErr = err
		if ctx.Err() != nil || time.Now().Add(500*time.Millisecond).After(deadline) {
			return fmt.Errorf("could not connect to %s: %v", s.peerAddr, lastErr)
		}
		select {
		case <-ctx.Done():
		case <-time.After(500 * time.Millisecond):
		}
		// libp2p's swarm refuses to redial a peer for a while after a failed dial
		if sw, ok := s.node.Host().Network().(*swarm.Swarm); ok {
			sw.Backoff().Clear(s.peerID)
		}
	}
}

func addrStrings(as []ma.Multiaddr) []string {
	out := make([]string, 0, len(as))
	for _, a := range as {
		out = append(out, a.String())
	}
	return out
}

// connFields are reported in every summary.
func (s *session) connFields(f obj) obj {
	if f == nil {
		f = obj{}
	}
	if s == nil || s.node == nil {
		return f
	}
	f["pubsub_topic"] = s.o.pubsubTopic
	f["cluster_id"] = s.o.clusterID
	f["connected_at_end"] = s.isConnected()
	f["disconnects"] = s.disconnects.Load()
	f["protocols"] = s.peerProtocols()
	return f
}

func (s *session) stop() {
	if s == nil || s.node == nil {
		return
	}
	s.stopping.Store(true)
	done := make(chan struct{})
	go func() {
		defer func() { _ = recover(); close(done) }()
		s.node.Stop()
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		s.log.Warn("go-waku node.Stop did not return within 5s")
	}
}

// waitTopicPeer waits until the bridge is a gossipsub peer on topic (it told us it is
// subscribed), then up to meshWait for it to be in our mesh. Returns whether it is in
// the mesh.
func (s *session) waitTopicPeer(ctx context.Context, topic string, deadline time.Time, meshWait time.Duration) (bool, error) {
	ps := s.node.Relay().PubSub()
	contains := func(ids []peer.ID) bool {
		for _, id := range ids {
			if id == s.peerID {
				return true
			}
		}
		return false
	}
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	var downSince time.Time
	for !contains(ps.ListPeers(topic)) {
		select {
		case <-ctx.Done():
			return false, ctx.Err()
		case <-t.C:
		}
		if s.isConnected() {
			downSince = time.Time{}
		} else if downSince.IsZero() {
			downSince = time.Now()
		} else if time.Since(downSince) > 2*time.Second {
			return false, fmt.Errorf("the bridge disconnected before becoming a gossipsub peer on %s (disconnects=%d)",
				topic, s.disconnects.Load())
		}
		if time.Now().After(deadline) {
			return false, fmt.Errorf("the bridge did not become a gossipsub peer on %s in time (connected=%v, disconnects=%d)",
				topic, s.isConnected(), s.disconnects.Load())
		}
	}
	meshDeadline := time.Now().Add(meshWait)
	if meshDeadline.After(deadline) {
		meshDeadline = deadline
	}
	for {
		if contains(ps.MeshPeers(topic)) {
			return true, nil
		}
		if time.Now().After(meshDeadline) {
			return false, nil
		}
		select {
		case <-ctx.Done():
			return false, ctx.Err()
		case <-t.C:
		}
	}
}

// makeMessage builds message i: payload "<prefix>-<i>" (padded with "|xxx…" up to
// size bytes when size is larger), timestamp now in ns, version 0.
func makeMessage(prefix string, i int, size int, contentTopic string) *pb.WakuMessage {
	payload := []byte(fmt.Sprintf("%s-%d", prefix, i))
	if size > len(payload) {
		pad := make([]byte, size-len(payload))
		for j := range pad {
			pad[j] = 'x'
		}
		pad[0] = '|'
		payload = append(payload, pad...)
	}
	return &pb.WakuMessage{
		Payload:      payload,
		ContentTopic: contentTopic,
		Version:      proto.Uint32(0),
		Timestamp:    proto.Int64(time.Now().UnixNano()),
	}
}

// pacer spaces sends at rate msgs/s (0 = no spacing).
type pacer struct {
	start time.Time
	rate  float64
}

// due is when message i is due: start + i / rate (rate <= 0: now, as fast as possible).
func (p pacer) due(i int) time.Time {
	if p.rate <= 0 {
		return time.Now()
	}
	return p.start.Add(time.Duration(float64(i) / p.rate * float64(time.Second)))
}

func (p pacer) wait(ctx context.Context, i int) {
	if p.rate <= 0 {
		return
	}
	if d := time.Until(p.due(i)); d > 0 {
		select {
		case <-ctx.Done():
		case <-time.After(d):
		}
	}
}

// counterValues gathers a counter vec from go-waku's prometheus registry by label.
func (s *session) counterValues(name, label string) map[string]float64 {
	out := map[string]float64{}
	mfs, err := s.reg.Gather()
	if err != nil {
		return out
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			key := ""
			for _, l := range m.GetLabel() {
				if l.GetName() == label {
					key = l.GetValue()
				}
			}
			if c := m.GetCounter(); c != nil {
				out[key] += c.GetValue()
			}
		}
	}
	return out
}
