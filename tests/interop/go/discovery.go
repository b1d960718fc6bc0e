package main

// Discovery commands (issue 39): go-waku's own ENR parser and peer-exchange client against the
// bridge, and a go-waku node that prints its ENR for the bridge to know.

import (
	"context"
	"encoding/hex"
	"net"
	"sort"
	"time"

	"github.com/ethereum/go-ethereum/p2p/enode"
	"github.com/ethereum/go-ethereum/p2p/enr"
	"github.com/ethereum/go-ethereum/rlp"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"go.uber.org/zap"

	"github.com/waku-org/go-waku/waku/v2/node"
	wps "github.com/waku-org/go-waku/waku/v2/peerstore"
	wprotocol "github.com/waku-org/go-waku/waku/v2/protocol"
	wenr "github.com/waku-org/go-waku/waku/v2/protocol/enr"
	"github.com/waku-org/go-waku/waku/v2/protocol/peer_exchange"
	"github.com/waku-org/go-waku/waku/v2/protocol/relay"
)

// enrFields decodes a record as go-waku does (enode.Parse checks the v4 signature).
func enrFields(n *enode.Node) (obj, error) {
	f := obj{"seq": n.Seq(), "tcp": n.TCP(), "udp": n.UDP()}
	if ip := n.IP(); ip != nil {
		f["ip"] = ip.String()
	}
	raw, err := rlp.EncodeToBytes(n.Record())
	if err != nil {
		return nil, err
	}
	f["rlp_hex"] = hex.EncodeToString(raw)
	f["text"] = n.String()
	bits, err := wenr.GetWakuEnrBitField(n)
	if err != nil {
		return nil, err
	}
	f["waku2"] = bits
	pid, addrs, err := wenr.Multiaddress(n)
	if err != nil {
		return nil, err
	}
	f["peer_id"] = pid.String()
	as := []string{}
	for _, a := range addrs {
		as = append(as, a.String())
	}
	f["multiaddrs"] = as
	rs, err := wenr.RelaySharding(n.Record())
	if err != nil {
		return nil, err
	}
	if rs != nil {
		f["cluster"] = rs.ClusterID
		f["shards"] = rs.ShardIDs
	}
	var rawMA []byte
	if err := n.Record().Load(enr.WithEntry(wenr.MultiaddrENRField, &rawMA)); err == nil {
		f["multiaddrs_field_hex"] = hex.EncodeToString(rawMA)
	}
	return f, nil
}

func cmdEnrDecode(o *options) result {
	n, err := enode.Parse(enode.ValidSchemes, o.enr)
	if err != nil {
		return fail(nil, "enode.Parse: %v", err)
	}
	f, err := enrFields(n)
	if err != nil {
		return fail(nil, "go-waku ENR accessors: %v", err)
	}
	return result{fields: f}
}

// cmdServe runs a go-waku relay node on --pubsub-topic that dials nobody: it prints its ENR
// and addresses ({"event":"ready"}), each peer that connects, and stays --seconds.
func cmdServe(ctx context.Context, o *options, log *zap.Logger) result {
	opts := []node.WakuNodeOption{
		node.WithLogger(log),
		node.WithHostAddress(&net.TCPAddr{IP: net.ParseIP("127.0.0.1"), Port: 0}),
		node.WithClusterID(uint16(o.clusterID)),
		node.WithWakuRelay(),
	}
	if shard, ok := staticShard(o.pubsubTopic, uint16(o.clusterID)); ok {
		opts = append(opts, node.WithShards([]uint16{shard}))
	}
	n, err := node.New(opts...)
	if err != nil {
		return fail(nil, "go-waku node.New: %v", err)
	}
	if err := n.Start(ctx); err != nil {
		return fail(nil, "go-waku node.Start: %v", err)
	}
	defer n.Stop()
	if _, err := n.Relay().Subscribe(ctx, wprotocol.NewContentFilter(o.pubsubTopic), relay.WithoutConsumer()); err != nil {
		log.Debug("relay subscribe", zap.Error(err))
	}
	n.Host().Network().Notify(&network.NotifyBundle{
		ConnectedF: func(nw network.Network, c network.Conn) {
			event("peer_connected", obj{"peer": c.RemotePeer().String()})
		},
	})
	addrs := []string{}
	for _, a := range n.ListenAddresses() {
		addrs = append(addrs, a.String())
	}
	event("ready", obj{"enr": n.ENR().String(), "peer_id": n.Host().ID().String(), "addrs": addrs})
	select {
	case <-ctx.Done():
	case <-time.After(time.Duration(o.seconds * float64(time.Second))):
	}
	return result{fields: obj{"peers": len(n.Host().Network().Peers())}}
}

// cmdPx asks the bridge (--peer) for --count peers with go-waku's peer-exchange client
// (filtered by --cluster-id and the shard of --pubsub-topic, as go-waku's option does), then
// dials every peer that exchange added to the peer store and reports them.
func cmdPx(ctx context.Context, o *options, log *zap.Logger) result {
	deadline := time.Now().Add(o.timeoutDur())
	s, err := newSession(ctx, o, log, nodeConfig{relay: false})
	if err != nil {
		return fail(nil, "%v", err)
	}
	defer s.stop()
	proto := string(peer_exchange.PeerExchangeID_v20alpha1)
	found := []obj{}
	fields := func() obj {
		f := s.connFields(nil)
		f["protocol"] = proto
		f["bridge_supports_protocol"] = s.supports(proto)
		f["peers"] = found
		return f
	}
	if err := s.connect(ctx, deadline); err != nil {
		return fail(fields(), "%v", err)
	}
	reqOpts := []peer_exchange.RequestOption{peer_exchange.WithPeer(s.peerID)}
	if shard, ok := staticShard(o.pubsubTopic, uint16(o.clusterID)); ok && o.clusterID != 0 {
		reqOpts = append(reqOpts, peer_exchange.FilterByShard(int(o.clusterID), int(shard)))
	}
	rctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	if err := s.node.PeerExchange().Request(rctx, o.count, reqOpts...); err != nil {
		return fail(fields(), "peer exchange request: %v", err)
	}
	ps := s.node.Host().Peerstore().(wps.WakuPeerstore)
	var ids peer.IDSlice
	for time.Now().Before(deadline) && ctx.Err() == nil {
		ids = ps.PeersByOrigin(wps.PeerExchange)
		if len(ids) >= o.count {
			break
		}
		time.Sleep(100 * time.Millisecond)
		if len(ids) > 0 && time.Since(startTime) > 3*time.Second {
			break // fewer than asked for: what the bridge knows
		}
	}
	sort.Sort(ids)
	for _, id := range ids {
		info := s.node.Host().Peerstore().PeerInfo(id)
		p := obj{"peer": id.String()}
		as := []string{}
		for _, a := range info.Addrs {
			as = append(as, a.String())
		}
		p["addrs"] = as
		if n, err := ps.ENR(id); err == nil && n != nil {
			p["enr"] = n.String()
		}
		dctx, dcancel := context.WithTimeout(ctx, 10*time.Second)
		err := s.node.Host().Connect(dctx, info)
		dcancel()
		p["connected"] = err == nil && s.node.Host().Network().Connectedness(id) == network.Connected
		if err != nil {
			p["dial_error"] = err.Error()
		}
		found = append(found, p)
	}
	if len(found) == 0 {
		return fail(fields(), "peer exchange: no peers received")
	}
	return result{fields: fields()}
}
