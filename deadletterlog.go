package dedup

import (
	"context"
	"log/slog"

	"github.com/dedup-go/dedup/delivery"
)

// noteDeadLetter readies d, a delivery of msg that no Observer watches,
// for the log line of its dead letter: the key, and the message's origin
// for its id when no key was derived. Only a dead letter pays for it.
func (r *Receiver[M, R]) noteDeadLetter(d *handed[R], msg M) {
	if d.Decision.Action != delivery.DeadLetter {
		return
	}
	d.Event.Key = d.Result.Key
	if m, ok := any(msg).(delivery.Originer); ok && d.Event.Key == "" {
		d.Event.Origin = m.Origin()
	}
}

// logDeadLetter logs a dead letter the adapter carried out, at warn level
// whatever the Observer: its reason, namespace, key (or the broker's
// message id when no key was derived) and the error it was decided on,
// never the body. An operator sees it in the default logger, as every
// poison message should be (a dropped one is logged by its adapter, at
// error level).
func (r *Receiver[M, R]) logDeadLetter(ctx context.Context, e *delivery.Event) {
	attrs := []slog.Attr{
		slog.String("reason", string(e.Decision.Reason)),
		slog.String("namespace", r.cfg.Namespace),
	}
	switch {
	case e.Key != "":
		attrs = append(attrs, slog.String("key", e.Key))
	case e.MessageID != "":
		attrs = append(attrs, slog.String("message_id", e.MessageID))
	}
	if e.Broker != "" {
		attrs = append(attrs, slog.String("broker", e.Broker), slog.String("source", e.Source))
	}
	if e.Decision.Err != nil {
		attrs = append(attrs, slog.Any("error", e.Decision.Err))
	}
	r.cfg.Logger.LogAttrs(ctx, slog.LevelWarn, "dedup: message dead-lettered", attrs...)
}
