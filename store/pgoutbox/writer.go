package pgoutbox

import (
	"context"
	"fmt"
	"hash/fnv"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"

	"github.com/dedup-go/dedup"
	"github.com/dedup-go/dedup/outbox"
	"github.com/dedup-go/dedup/store"
)

// Message is an outgoing message a handler writes with Writer.Add.
type Message struct {
	// Name tells the handler's messages apart, and with the incoming
	// message's key makes the id (outbox.MessageID): it must be the same
	// each time the handler runs for the same message, and unique among
	// its messages. Empty: the message's position among the writer's,
	// "1" for the first Add, "2" for the second, and so on, which suits a
	// handler that writes its messages in a fixed order.
	Name string

	// Destination is where the message goes, in the relay's publisher's
	// terms (a subject on JetStream). Required: not empty, at most 255
	// bytes, valid UTF-8 without spaces or control characters.
	Destination string

	// OrderingKey groups the messages that the relays publish in the
	// order they were written (see "Order" in the package documentation).
	// Empty: no order with any other message. At most 1 KiB of valid
	// UTF-8 without NUL.
	OrderingKey string

	// Body is the message's data, up to Options.MaxBodySize bytes.
	Body []byte

	// Header holds the message's headers: names of letters, digits and
	// !#$%&'*+-.^_`|~ (an HTTP token, which every broker takes), values of
	// valid UTF-8 without NUL, CR or LF, names and values together up to
	// Options.MaxHeaderSize bytes.
	Header map[string]string
}

// Writer adds messages to the outbox inside one transaction: the handler's.
// Make one per transaction (TxHandler runs the handler again in a new
// transaction after a serialization failure, and positions count again
// from 1). It is not safe for concurrent use, as the transaction is not.
type Writer struct {
	o     *Outbox
	tx    pgx.Tx
	key   string
	n     int
	names map[string]bool
}

// Writer returns a Writer of messages inside tx, for the handler running
// under ctx: the ids of its messages derive from the key of the claim the
// handler holds (store.ClaimFromContext). Outside a handler it fails with
// dedup.ErrNoClaim.
//
//	handler, err := pgstore.TxHandler(s, func(ctx context.Context, tx pgx.Tx, p Payment) (Receipt, error) {
//		if _, err := tx.Exec(ctx, `INSERT INTO payments ...`, p.ID, p.Amount); err != nil {
//			return Receipt{}, err
//		}
//		w, err := ob.Writer(ctx, tx)
//		if err != nil {
//			return Receipt{}, err
//		}
//		_, err = w.Add(ctx, pgoutbox.Message{Name: "captured", Destination: "payments.captured", OrderingKey: p.Account, Body: body})
//		return Receipt{ID: p.ID}, err
//	}, nil)
func (o *Outbox) Writer(ctx context.Context, tx pgx.Tx) (*Writer, error) {
	if tx == nil {
		return nil, fmt.Errorf("pgoutbox: %w: the transaction is nil", store.ErrInvalidConfig)
	}
	held, ok := store.ClaimFromContext(ctx)
	if !ok {
		return nil, dedup.ErrNoClaim
	}
	return &Writer{o: o, tx: tx, key: held.Key}, nil
}

// Add writes m into the outbox in the writer's transaction and returns
// its id. It is sent once the transaction commits, and never if it rolls
// back. A message the outbox refuses is an error matching
// ErrInvalidMessage, marked permanent: return it, and the transaction
// rolls back. A database error (the statement is bounded by
// Options.Timeout) leaves the transaction unusable: return it too.
//
// A message whose id the outbox already holds is not written again (its
// id is returned, without error): the handler ran again for a message
// whose record expired, and what it wrote the first time was or will be
// sent. The outbox holds an id until the message is sent, and for
// RelayOptions.Retention after it was written.
func (w *Writer) Add(ctx context.Context, m Message) (string, error) {
	w.n++
	name := m.Name
	if name == "" {
		name = strconv.Itoa(w.n)
	}
	if err := w.o.check(m, name); err != nil {
		return "", dedup.Permanent(err)
	}
	if w.names[name] {
		return "", dedup.Permanent(fmt.Errorf("%w: a message named %q was added already in this transaction: its id would be the same", ErrInvalidMessage, name))
	}
	if w.names == nil {
		w.names = make(map[string]bool)
	}
	w.names[name] = true
	id := outbox.MessageID(w.key, name)
	var headers any
	if m.Header != nil {
		headers = m.Header
	}
	body := m.Body
	if body == nil {
		body = []byte{}
	}
	cctx, cancel := context.WithTimeout(ctx, w.o.cfg.timeout)
	defer cancel()
	args := []any{id, w.key, name, m.Destination, m.OrderingKey, keyHash(m.OrderingKey, id), body, headers}
	if w.o.cfg.notify {
		args = append(args, w.o.cfg.names.plain)
	}
	rows, err := w.tx.Query(cctx, w.o.sql.add, args...)
	if err == nil {
		for rows.Next() {
		}
		rows.Close()
		err = rows.Err()
	}
	if err != nil {
		return "", fmt.Errorf("pgoutbox: add %s to %s: %w", id, w.o.cfg.names.plain, err)
	}
	return id, nil
}

// keyHash is the 31-bit FNV-1a of the ordering key, or of the id for a
// message without one, so those spread over every bucket.
func keyHash(orderingKey, id string) int32 {
	h := fnv.New32a()
	if orderingKey == "" {
		h.Write([]byte(id))
	} else {
		h.Write([]byte(orderingKey))
	}
	return int32(h.Sum32() & 0x7fffffff)
}

// check refuses what the outbox cannot hold or a broker would refuse.
func (o *Outbox) check(m Message, name string) error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", ErrInvalidMessage, fmt.Sprintf(format, args...))
	}
	switch {
	case m.Destination == "":
		return bad("no destination")
	case len(m.Destination) > MaxDestinationLength:
		return bad("the destination is %d bytes, over %d", len(m.Destination), MaxDestinationLength)
	case !utf8.ValidString(m.Destination) || hasSpaceOrControl(m.Destination):
		return bad("the destination %q is not valid UTF-8 without spaces or control characters", m.Destination)
	case len(m.OrderingKey) > MaxOrderingKeyLength:
		return bad("the ordering key is %d bytes, over %d", len(m.OrderingKey), MaxOrderingKeyLength)
	case !validText(m.OrderingKey):
		return bad("the ordering key is not valid UTF-8 without NUL")
	case len(name) > MaxNameLength:
		return bad("the name is %d bytes, over %d", len(name), MaxNameLength)
	case !validText(name):
		return bad("the name is not valid UTF-8 without NUL")
	case len(m.Body) > o.cfg.maxBody:
		return bad("the body is %d bytes, over MaxBodySize %d", len(m.Body), o.cfg.maxBody)
	}
	size := 0
	for k, v := range m.Header {
		size += len(k) + len(v)
		if !isToken(k) {
			return bad("header name %q is not a token (letters, digits, !#$%%&'*+-.^_`|~)", k)
		}
		if !validText(v) || strings.ContainsAny(v, "\r\n") {
			return bad("header %s: the value is not valid UTF-8 without NUL, CR or LF", k)
		}
	}
	if size > o.cfg.maxHeader {
		return bad("the headers are %d bytes, over MaxHeaderSize %d", size, o.cfg.maxHeader)
	}
	return nil
}

func validText(s string) bool { return utf8.ValidString(s) && !strings.ContainsAny(s, "\x00") }

func hasSpaceOrControl(s string) bool {
	for _, r := range s {
		if unicode.IsSpace(r) || unicode.IsControl(r) {
			return true
		}
	}
	return false
}

// isToken reports whether s is an HTTP token (RFC 9110): what NATS, AMQP
// and Kafka all take as a header name.
func isToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case c < 0x80 && strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0:
		default:
			return false
		}
	}
	return true
}
