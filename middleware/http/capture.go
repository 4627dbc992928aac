package deduphttp

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
)

// capture is the ResponseWriter the handler writes to. It holds the
// response back (status and body in a buffer, headers in the real writer's
// map) until the outcome is recorded, so that a client never sees a
// response whose retry would not be answered with it. It stops holding
// back (the response goes out as it is written) when the body passes the
// cap (the response is then not kept) or when the handler streams
// (Flush, Hijack: the key is then released).
type capture struct {
	w        http.ResponseWriter
	limit    int
	status   int    // 0 until the handler writes a header or a body
	buf      []byte // the body held back
	sent     bool   // the status line went out: what follows passes through
	notKept  bool   // the body passed the cap
	streamed bool   // the handler flushed or hijacked
	hijacked bool
}

var (
	_ http.ResponseWriter = (*capture)(nil)
	_ http.Flusher        = (*capture)(nil)
	_ http.Hijacker       = (*capture)(nil)
)

func (c *capture) reset(w http.ResponseWriter, limit int) {
	*c = capture{w: w, limit: limit, buf: c.buf[:0]}
}

// Header returns the real writer's header map: nothing is sent until the
// capture says so, and nothing needs copying when it does.
func (c *capture) Header() http.Header { return c.w.Header() }

// WriteHeader records the status. Informational statuses (1xx but 101)
// go out at once, as net/http sends them.
func (c *capture) WriteHeader(code int) {
	if code < 100 || code > 999 {
		panic(fmt.Sprintf("invalid WriteHeader code %v", code)) // what net/http does
	}
	switch {
	case c.status != 0 || c.hijacked:
		return
	case code >= 100 && code <= 199 && code != http.StatusSwitchingProtocols:
		c.w.WriteHeader(code)
		return
	}
	c.status = code
	if c.sent {
		c.w.WriteHeader(code)
	}
}

// Write holds p back, or sends it once the capture stopped holding back.
// A body that passes the cap sends what was held and everything after it.
func (c *capture) Write(p []byte) (int, error) {
	if c.hijacked {
		return 0, http.ErrHijacked
	}
	if c.status == 0 {
		c.WriteHeader(http.StatusOK)
	}
	if !bodyAllowed(c.status) {
		return 0, http.ErrBodyNotAllowed
	}
	if c.sent {
		return c.w.Write(p)
	}
	if len(c.buf)+len(p) > c.limit {
		c.notKept = true
		if err := c.send(); err != nil {
			return 0, err
		}
		return c.w.Write(p)
	}
	c.buf = append(c.buf, p...)
	return len(p), nil
}

// Flush sends what was held back and flushes: the handler streams, so the
// response cannot be replayed and the key will be released.
func (c *capture) Flush() { _ = c.FlushError() }

// FlushError is Flush with the error of the real writer's flush
// (http.ResponseController calls it).
func (c *capture) FlushError() error {
	if c.hijacked {
		return http.ErrHijacked
	}
	c.streamed = true
	if c.status == 0 {
		c.status = http.StatusOK
	}
	if err := c.send(); err != nil {
		return err
	}
	return http.NewResponseController(c.w).Flush()
}

// Hijack hands the connection over: the key will be released. What was
// written before goes out first.
func (c *capture) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	c.streamed = true
	if c.status != 0 {
		if err := c.send(); err != nil {
			return nil, nil, err
		}
	}
	conn, rw, err := http.NewResponseController(c.w).Hijack()
	if err == nil {
		c.hijacked = true
	}
	return conn, rw, err
}

// Unwrap lets http.ResponseController reach the real writer for what the
// capture does not intercept (deadlines, full duplex).
func (c *capture) Unwrap() http.ResponseWriter { return c.w }

// send stops holding back: the status and the held body go out. Once only.
func (c *capture) send() error {
	if c.sent {
		return nil
	}
	c.sent = true
	c.w.WriteHeader(c.status)
	if len(c.buf) == 0 {
		return nil
	}
	_, err := c.w.Write(c.buf)
	return err
}

// finish sends the response held back in one write (net/http sets its
// Content-Length when it fits its buffer, as for a replay). It does
// nothing for a response that already went out.
func (c *capture) finish() {
	if c.sent || c.hijacked {
		return
	}
	if c.status == 0 {
		c.status = http.StatusOK
	}
	_ = c.send()
}

// bodyAllowed reports whether a response of status may have a body.
func bodyAllowed(status int) bool {
	switch {
	case status >= 100 && status <= 199, status == http.StatusNoContent, status == http.StatusNotModified:
		return false
	}
	return true
}
