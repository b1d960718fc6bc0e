package main

import (
	"errors"
	"os"
	"sync"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// go-waku hides some protocol outcomes in its logs only (e.g. the status code of a
// failed filter SUBSCRIBE, the cause of a failed lightpush, why the metadata protocol
// dropped a peer). captureCore wraps the stderr core given to go-waku and hands
// entries with one of the watched messages to a hook, whatever the log level.

var watchedMessages = map[string]bool{
	// filter/client.go Subscribe: the FilterError with the service node's status code
	"Failed to subscribe": true,
	// lightpush/waku_lightpush.go Publish: the stream / response error
	"could not publish message": true,
	// metadata/waku_metadata.go: the reason the peer was dropped
	"disconnecting from peer":      true,
	"shard mismatch":               true,
	"could not obtain peer shards": true,
	// relay/waku_relay.go pubsubTopicMsgHandler: a relayed message that is not a
	// WakuMessage stops go-waku's handler for the topic (go-waku returns from the loop)
	"decoding message": true,
}

type captured struct {
	Message string
	Err     error
	Fields  map[string]any
}

type captureHub struct {
	mu   sync.Mutex
	last map[string]captured
	sink func(c captured) // called for every watched entry (may be nil)
}

var hub = &captureHub{last: map[string]captured{}}

func (h *captureHub) take(msg string) (captured, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	c, ok := h.last[msg]
	delete(h.last, msg)
	return c, ok
}

func (h *captureHub) put(c captured) {
	h.mu.Lock()
	h.last[c.Message] = c
	sink := h.sink
	h.mu.Unlock()
	if sink != nil {
		sink(c)
	}
}

type captureCore struct {
	zapcore.Core
	level zapcore.Level
	ctx   []zapcore.Field
}

func (c *captureCore) Enabled(l zapcore.Level) bool {
	return l >= zapcore.InfoLevel || c.Core.Enabled(l)
}

// Level lets zap/go-log read the configured level (not the widened one above).
func (c *captureCore) Level() zapcore.Level { return c.level }

func (c *captureCore) With(f []zapcore.Field) zapcore.Core {
	ctx := make([]zapcore.Field, 0, len(c.ctx)+len(f))
	ctx = append(ctx, c.ctx...)
	ctx = append(ctx, f...)
	return &captureCore{Core: c.Core.With(f), level: c.level, ctx: ctx}
}

func (c *captureCore) Check(ent zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	if watchedMessages[ent.Message] {
		ce = ce.AddCore(ent, hookCore{ctx: c.ctx})
	}
	return c.Core.Check(ent, ce)
}

type hookCore struct{ ctx []zapcore.Field }

func (h hookCore) Enabled(zapcore.Level) bool { return true }
func (h hookCore) With(f []zapcore.Field) zapcore.Core {
	return hookCore{ctx: append(append([]zapcore.Field{}, h.ctx...), f...)}
}
func (h hookCore) Check(e zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	return ce.AddCore(e, h)
}
func (h hookCore) Sync() error { return nil }
func (h hookCore) Write(ent zapcore.Entry, fields []zapcore.Field) error {
	c := captured{Message: ent.Message, Fields: map[string]any{}}
	enc := zapcore.NewMapObjectEncoder()
	for _, f := range append(append([]zapcore.Field{}, h.ctx...), fields...) {
		if f.Type == zapcore.ErrorType {
			if e, ok := f.Interface.(error); ok {
				c.Err = e
			}
		}
		f.AddTo(enc)
	}
	for k, v := range enc.Fields {
		c.Fields[k] = v
	}
	hub.put(c)
	return nil
}

func newLogger(level zapcore.Level) *zap.Logger {
	encCfg := zap.NewProductionEncoderConfig()
	encCfg.EncodeTime = zapcore.ISO8601TimeEncoder
	encCfg.EncodeLevel = zapcore.CapitalLevelEncoder
	inner := zapcore.NewCore(zapcore.NewConsoleEncoder(encCfg), zapcore.Lock(os.Stderr), level)
	return zap.New(&captureCore{Core: inner, level: level})
}

// asType finds an error of type T in err's chain.
func asType[T error](err error) (T, bool) {
	var t T
	if err == nil {
		return t, false
	}
	ok := errors.As(err, &t)
	return t, ok
}
