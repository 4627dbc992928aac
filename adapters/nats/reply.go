package dedupnats

import (
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/dedup-go/dedup/delivery"
	natsgo "github.com/nats-io/nats.go"
)

// HeaderStatus is set on every reply the Subscriber sends: the
// delivery.Status of the delivery ("processed", "duplicate", "bypassed"),
// or "none" when the request was not done, with delivery.HeaderReason and
// delivery.HeaderError, and Dedup-Retry-After (milliseconds) when it should
// be sent again: ReplyErrorOf reads them.
const HeaderStatus = "Dedup-Status"

// headerRetryAfter is set on a reply asking the requester to send the
// request again later: how long to wait, in milliseconds.
const headerRetryAfter = "Dedup-Retry-After"

// ReplyEncoder turns a handler's result into a reply body.
type ReplyEncoder interface {
	// Marshal encodes v.
	Marshal(v any) ([]byte, error)
}

// defaultReplyEncoder sends a []byte, string or json.RawMessage result as
// it is, and anything else as JSON.
type defaultReplyEncoder struct{}

// Marshal encodes v as described on defaultReplyEncoder.
func (defaultReplyEncoder) Marshal(v any) ([]byte, error) {
	switch x := v.(type) {
	case []byte:
		return x, nil
	case string:
		return []byte(x), nil
	case json.RawMessage:
		return x, nil
	}
	return json.Marshal(v)
}

// ReplyError is a reply saying the request was not done: it should be sent
// again later (Retry) or it never will be (dead letter). ReplyErrorOf finds
// it in a reply.
type ReplyError struct {
	// Reason is the decision's reason, such as "in-flight" or "undecodable".
	Reason delivery.Reason
	// Message is the error's text, when there was one.
	Message string
	// RetryAfter is how long to wait before sending the request again; zero
	// when it should not be sent again.
	RetryAfter time.Duration
}

// Error describes the refusal.
func (e *ReplyError) Error() string {
	s := "dedupnats: request not done: " + string(e.Reason)
	if e.RetryAfter > 0 {
		s += fmt.Sprintf(" (retry after %v)", e.RetryAfter)
	}
	if e.Message != "" {
		s += ": " + e.Message
	}
	return s
}

// ReplyErrorOf returns the *ReplyError a Subscriber's reply carries, or nil
// when the reply carries the handler's result.
func ReplyErrorOf(reply *natsgo.Msg) error {
	if reply == nil || reply.Header == nil || reply.Header.Get(delivery.HeaderReason) == "" {
		return nil
	}
	e := &ReplyError{Reason: delivery.Reason(reply.Header.Get(delivery.HeaderReason)), Message: reply.Header.Get(delivery.HeaderError)}
	if ms, err := strconv.ParseInt(reply.Header.Get(headerRetryAfter), 10, 64); err == nil && ms > 0 {
		e.RetryAfter = time.Duration(ms) * time.Millisecond
	}
	return e
}

// resultReply builds the reply carrying a done request's result.
func resultReply(to string, status delivery.Status, body []byte) *natsgo.Msg {
	m := natsgo.NewMsg(to)
	m.Data = body
	m.Header.Set(HeaderStatus, status.String())
	return m
}

// errorReply builds the reply refusing a request.
func errorReply(to string, d delivery.Decision) *natsgo.Msg {
	m := natsgo.NewMsg(to)
	m.Header.Set(HeaderStatus, delivery.StatusNone.String())
	m.Header.Set(delivery.HeaderReason, string(d.Reason))
	if d.Err != nil {
		m.Header.Set(delivery.HeaderError, oneLine(d.Err.Error()))
	}
	if d.Action == delivery.Retry {
		m.Header.Set(headerRetryAfter, strconv.FormatInt(max(d.Delay.Milliseconds(), 1), 10))
	}
	return m
}

var _ ReplyEncoder = defaultReplyEncoder{}
