package idstrategy

import (
	"reflect"

	"github.com/dedup-go/dedup"
	"github.com/dedup-go/dedup/adapter"
)

// Field uses a field of the message as its id: the producer's own message id
// or a business id such as an order number. name is only used in error
// messages, to say which field was empty or unusable.
//
// It panics if get is nil. It does not allocate beyond what get does.
func Field[M any](name string, get func(M) string) dedup.KeyFunc[M] {
	if get == nil {
		misconfigured("Field", "get is nil (field %q)", name)
	}
	strategy := "field " + quote(name)
	return func(m M) (string, error) {
		id := get(m)
		if id == "" {
			return "", noKey(strategy, "the field is empty")
		}
		if err := check(strategy, id, adapter.DefaultMaxIDLength); err != nil {
			return "", err
		}
		return id, nil
	}
}

// Header uses a message header as its id, read through get, which reports
// whether the header is present. Each broker adapter supplies a getter for its
// own message type. A header that is missing and one that is present but empty
// both fail with dedup.ErrNoKey; the message says which.
//
// Values are used exactly as they are: no trimming or case folding, because
// two producers that differ only in such details did not send the same id.
//
// It panics if get is nil.
func Header[M any](name string, get func(M, string) (string, bool)) dedup.KeyFunc[M] {
	if get == nil {
		misconfigured("Header", "get is nil (header %q)", name)
	}
	strategy := "header " + quote(name)
	return func(m M) (string, error) {
		id, ok := get(m, name)
		switch {
		case !ok:
			return "", noKey(strategy, "the header is missing")
		case id == "":
			return "", noKey(strategy, "the header is empty")
		}
		if err := check(strategy, id, adapter.DefaultMaxIDLength); err != nil {
			return "", err
		}
		return id, nil
	}
}

// IdempotencyKeyer is a message that knows its own id. Returning "" means the
// message has none.
type IdempotencyKeyer interface {
	IdempotencyKey() string
}

// Method uses the message's IdempotencyKey method as its id. A nil message (a
// nil pointer, or a nil interface or one holding a nil pointer) fails with
// dedup.ErrNoKey instead of calling the method, which would most likely panic
// on it.
func Method[M IdempotencyKeyer]() dedup.KeyFunc[M] {
	const strategy = "method IdempotencyKey"
	kind := reflect.TypeFor[M]().Kind()
	return func(m M) (string, error) {
		if isNil(kind, m) {
			return "", noKey(strategy, "the message is nil")
		}
		id := m.IdempotencyKey()
		if id == "" {
			return "", noKey(strategy, "IdempotencyKey returned an empty string")
		}
		if err := check(strategy, id, adapter.DefaultMaxIDLength); err != nil {
			return "", err
		}
		return id, nil
	}
}

// isNil reports whether m is a nil pointer, or a nil interface or one holding
// a nil pointer. kind is M's kind, looked up once, so that messages of other
// kinds cost no reflection.
func isNil[M any](kind reflect.Kind, m M) bool {
	if kind != reflect.Interface && kind != reflect.Pointer {
		return false
	}
	v := any(m)
	if v == nil {
		return true
	}
	rv := reflect.ValueOf(v)
	return rv.Kind() == reflect.Pointer && rv.IsNil()
}
