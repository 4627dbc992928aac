package idstrategy_test

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/dedup-go/dedup"
	"github.com/dedup-go/dedup/adapter"
	"github.com/dedup-go/dedup/idstrategy"
)

// hashOf is what HashLong makes of id, computed independently.
func hashOf(id string) string {
	sum := sha256.Sum256([]byte(id))
	return "sha256:" + hex.EncodeToString(sum[:])
}

func TestHashLong(t *testing.T) {
	t.Parallel()
	field := idstrategy.Field("ID", orderID)
	raw := func(o order) (string, error) { return o.ID, nil } // unchecked, as an adapter might be
	tests := []struct {
		name   string
		key    dedup.KeyFunc[order]
		id     string
		want   string
		target error
		msg    string
	}{
		{name: "short passes", key: idstrategy.HashLong(field, 100), id: "order-1", want: "order-1"},
		{name: "at the limit passes", key: idstrategy.HashLong(field, 100), id: exactLimit[:100], want: exactLimit[:100]},
		{name: "over the limit is hashed", key: idstrategy.HashLong(field, 100), id: exactLimit[:101], want: hashOf(exactLimit[:101])},
		{name: "a megabyte", key: idstrategy.HashLong(field, adapter.DefaultMaxIDLength), id: megabyte, want: hashOf(megabyte)},
		{name: "a megabyte, unchecked inner", key: idstrategy.HashLong(raw, adapter.DefaultMaxIDLength), id: megabyte, want: hashOf(megabyte)},
		{name: "limit above the default", key: idstrategy.HashLong(field, 1000), id: overLimit, want: overLimit},
		{name: "smallest limit", key: idstrategy.HashLong(field, 71), id: exactLimit[:72], want: hashOf(exactLimit[:72])},
		{name: "empty", key: idstrategy.HashLong(field, 100), id: "", target: dedup.ErrNoKey,
			msg: `idstrategy: hash long: field "ID": dedup: message has no id: the field is empty`},
		{name: "empty, unchecked inner", key: idstrategy.HashLong(raw, 100), id: "", target: dedup.ErrNoKey, msg: "hash long"},
		{name: "invalid UTF-8 is not hashed", key: idstrategy.HashLong(field, 100), id: badUTF8, target: dedup.ErrInvalidKey, msg: "not valid UTF-8"},
		{name: "long invalid UTF-8 is not hashed", key: idstrategy.HashLong(field, 100), id: megabyte + "\xff", target: dedup.ErrInvalidKey, msg: "not valid UTF-8"},
		{name: "long invalid UTF-8, unchecked inner", key: idstrategy.HashLong(raw, 100), id: megabyte + "\xff", target: dedup.ErrInvalidKey, msg: "not valid UTF-8"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			id, err := tt.key(order{ID: tt.id})
			if tt.target != nil {
				wantErr(t, id, err, tt.target, tt.msg)
				return
			}
			require.NoError(t, err)
			require.Equal(t, short(tt.want), short(id))
			require.Equal(t, len(tt.want), len(id))
		})
	}
}

func TestMaxLength(t *testing.T) {
	t.Parallel()
	field := idstrategy.Field("ID", orderID)
	tests := []struct {
		name   string
		key    dedup.KeyFunc[order]
		id     string
		want   string
		target error
		msg    string
	}{
		{name: "lower, within", key: idstrategy.MaxLength(field, 10), id: "0123456789", want: "0123456789"},
		{name: "lower, over", key: idstrategy.MaxLength(field, 10), id: "0123456789a", target: dedup.ErrInvalidKey,
			msg: "idstrategy: max length: dedup: invalid message id: the id is 11 bytes, over the limit of 10"},
		{name: "higher, within", key: idstrategy.MaxLength(field, 1000), id: overLimit, want: overLimit},
		{name: "higher, over", key: idstrategy.MaxLength(field, 1000), id: megabyte, target: dedup.ErrInvalidKey, msg: "over the limit of 1000"},
		{name: "hashed when wrapped", key: idstrategy.HashLong(idstrategy.MaxLength(field, 2000), 1000), id: overLimit, want: overLimit},
		{name: "hashed when over", key: idstrategy.HashLong(idstrategy.MaxLength(field, 10), 100), id: strings.Repeat("z", 101), want: hashOf(strings.Repeat("z", 101))},
		{name: "empty", key: idstrategy.MaxLength(field, 10), id: "", target: dedup.ErrNoKey, msg: `max length: field "ID"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			id, err := tt.key(order{ID: tt.id})
			if tt.target != nil {
				wantErr(t, id, err, tt.target, tt.msg)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.want, id) // may be over the default limit: that is the point
		})
	}
}

func TestMaxLengthTooLongError(t *testing.T) {
	t.Parallel()
	_, err := idstrategy.MaxLength(idstrategy.Field("ID", orderID), 10)(order{ID: "0123456789a"})
	var long *idstrategy.TooLongError
	require.ErrorAs(t, err, &long)
	require.Equal(t, &idstrategy.TooLongError{ID: "0123456789a", Limit: 10}, long)
}

func TestTooLongErrorFromAHandWrittenStrategy(t *testing.T) {
	t.Parallel()
	// An adapter's KeyFunc can return the error itself and still be hashed.
	adapter := func(o order) (string, error) {
		return "", &idstrategy.TooLongError{ID: o.ID, Limit: 16}
	}
	var err error = &idstrategy.TooLongError{ID: megabyte, Limit: 16}
	require.ErrorIs(t, err, dedup.ErrInvalidKey)
	id, err := idstrategy.HashLong(adapter, 100)(order{ID: megabyte})
	wantID(t, id, err, hashOf(megabyte))
}
