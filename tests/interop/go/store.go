package main

import (
	"context"
	"encoding/hex"
	"fmt"
	"strings"
	"time"

	"go.uber.org/zap"
	"google.golang.org/protobuf/proto"

	wprotocol "github.com/waku-org/go-waku/waku/v2/protocol"
	wpb "github.com/waku-org/go-waku/waku/v2/protocol/pb"
	"github.com/waku-org/go-waku/waku/v2/protocol/store"
)

func parseHashes(s string) ([]wpb.MessageHash, error) {
	var out []wpb.MessageHash
	for _, h := range strings.Split(s, ",") {
		h = strings.TrimSpace(h)
		if h == "" {
			continue
		}
		b, err := hex.DecodeString(strings.TrimPrefix(strings.TrimPrefix(h, "0x"), "0X"))
		if err != nil || len(b) != 32 {
			return nil, fmt.Errorf("bad message hash %q (want 32 bytes hex)", h)
		}
		out = append(out, wpb.ToMessageHash(b))
	}
	return out, nil
}

func cmdStore(ctx context.Context, o *options, log *zap.Logger) result {
	deadline := time.Now().Add(o.timeoutDur())
	ctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()

	var hashQuery []wpb.MessageHash
	if o.hashes != "" {
		var err error
		if hashQuery, err = parseHashes(o.hashes); err != nil {
			return fail(nil, "%v", err)
		}
	}
	s, err := newSession(ctx, o, log, nodeConfig{relay: false})
	if err != nil {
		return fail(nil, "%v", err)
	}
	defer s.stop()

	pageSize := o.pageSize
	effective := pageSize
	if effective == 0 {
		effective = store.DefaultPageSize
	} else if effective > store.MaxPageSize {
		effective = store.MaxPageSize
	}
	messages, pages, mismatches := 0, 0, 0
	hashes := []string{}
	payloads := []any{}
	fields := func() obj {
		f := s.connFields(nil)
		f["protocol"] = string(store.StoreQueryID_v300)
		f["messages"] = messages
		f["pages"] = pages
		f["hashes"] = hashes
		f["payloads"] = payloads
		f["hash_mismatches"] = mismatches
		f["page_size"] = effective
		f["forward"] = o.forward
		return f
	}
	if err := s.connect(ctx, deadline); err != nil {
		return fail(fields(), "%v", err)
	}

	opts := []store.RequestOption{
		store.WithPeer(s.peerID),
		store.WithPaging(o.forward, pageSize),
		store.IncludeData(o.includeData),
	}
	if o.skipRateLimit {
		opts = append(opts, store.SkipRateLimit())
	}
	var criteria store.Criteria
	if hashQuery != nil {
		criteria = store.MessageHashCriteria{MessageHashes: hashQuery}
	} else {
		fc := store.FilterCriteria{ContentFilter: wprotocol.NewContentFilter(o.pubsubTopic, o.contentTopics.vals...)}
		if o.startNs != 0 {
			fc.TimeStart = proto.Int64(o.startNs)
		}
		if o.endNs != 0 {
			fc.TimeEnd = proto.Int64(o.endNs)
		}
		criteria = fc
	}

	storeErr := func(err error) result {
		f := fields()
		if se, ok := asType[*store.StoreError](err); ok {
			f["status"] = se.Code
			f["status_desc"] = se.Message
		}
		return fail(f, "store query (page %d): %v", pages+1, err)
	}

	res, err := s.node.Store().Request(ctx, criteria, opts...)
	if err != nil {
		return storeErr(err)
	}
	for !res.IsComplete() {
		pages++
		page := res.Messages()
		for _, kv := range page {
			h := hexHash(kv.GetMessageHash())
			hashes = append(hashes, h)
			if m := kv.GetMessage(); m != nil {
				payloads = append(payloads, payloadText(m.Payload))
				topic := kv.GetPubsubTopic()
				if own := m.Hash(topic).String(); own != h {
					mismatches++
					event("hash_mismatch", obj{"store_hash": h, "computed": own, "pubsub_topic": topic})
				}
			} else {
				payloads = append(payloads, nil)
			}
		}
		messages += len(page)
		resp := res.Response()
		event("page", obj{"count": len(page), "status": resp.GetStatusCode(), "has_cursor": len(res.Cursor()) > 0})
		if res.Cursor() == nil {
			break
		}
		nextOpts := []store.RequestOption{}
		if o.skipRateLimit {
			nextOpts = append(nextOpts, store.SkipRateLimit())
		}
		if err := res.Next(ctx, nextOpts...); err != nil {
			return storeErr(err)
		}
	}
	f := fields()
	f["status"] = 200
	if mismatches > 0 {
		return fail(f, "%d message hashes returned by the store differ from the hash computed by go-waku", mismatches)
	}
	return result{fields: f}
}

func hexHash(b []byte) string { return "0x" + hex.EncodeToString(b) }
