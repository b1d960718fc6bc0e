package main

import (
	"bufio"
	"bytes"
	"encoding/hex"
	"encoding/json"
	"os"
	"sync"
	"time"
	"unicode/utf8"
)

// out writes one JSON object per line on stdout. Every write is flushed at once so
// that a test reading the pipe sees events (notably {"event":"ready"}) as they happen.
type out struct {
	mu     sync.Mutex
	w      *bufio.Writer
	closed bool
}

var stdout = &out{w: bufio.NewWriter(os.Stdout)}

type obj = map[string]any

func (o *out) emit(v obj) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.closed {
		return
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		buf.Reset()
		_ = enc.Encode(obj{"event": "internal_error", "error": err.Error()})
	}
	_, _ = o.w.Write(buf.Bytes()) // Encode ends the line
	_ = o.w.Flush()
}

// event prints {"event": name, "t_ms": ms since start, ...fields}.
func event(name string, fields obj) {
	v := obj{"event": name, "t_ms": time.Since(startTime).Milliseconds()}
	for k, x := range fields {
		v[k] = x
	}
	stdout.emit(v)
}

// summary prints the final line and closes the output: anything a background goroutine
// tries to print afterwards is dropped, so the summary stays the last line.
func summary(command string, ok bool, errMsg string, fields obj) {
	v := obj{"event": "summary", "command": command, "ok": ok, "error": nil,
		"elapsed_ms": time.Since(startTime).Milliseconds()}
	if errMsg != "" {
		v["error"] = errMsg
	}
	for k, x := range fields {
		v[k] = x
	}
	stdout.emit(v)
	stdout.mu.Lock()
	stdout.closed = true
	stdout.mu.Unlock()
}

// payloadText returns the payload as a string when it is valid UTF-8, else nil.
func payloadText(p []byte) any {
	if utf8.Valid(p) {
		return string(p)
	}
	return nil
}

func hexs(b []byte) string { return hex.EncodeToString(b) }
