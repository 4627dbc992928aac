package idstrategy_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/dedup-go/dedup"
	"github.com/dedup-go/dedup/adapter"
	"github.com/dedup-go/dedup/idstrategy"
)

func TestField(t *testing.T) {
	t.Parallel()
	key := idstrategy.Field("ID", orderID)
	tests := []struct {
		name   string
		id     string
		want   string
		target error
		msg    string
	}{
		{name: "plain", id: "order-42", want: "order-42"},
		{name: "exactly the limit", id: exactLimit, want: exactLimit},
		{name: "whitespace is kept", id: " 42 ", want: " 42 "},
		{name: "unicode", id: "заказ-42", want: "заказ-42"},
		{name: "empty", id: "", target: dedup.ErrNoKey,
			msg: `idstrategy: field "ID": dedup: message has no id: the field is empty`},
		{name: "one byte over", id: overLimit, target: dedup.ErrInvalidKey, msg: "513 bytes, over the limit of 512"},
		{name: "a megabyte", id: megabyte, target: dedup.ErrInvalidKey, msg: `field "ID"`},
		{name: "invalid UTF-8", id: badUTF8, target: dedup.ErrInvalidKey, msg: "not valid UTF-8"},
		{name: "long and invalid UTF-8", id: megabyte + "\xff", target: dedup.ErrInvalidKey, msg: "not valid UTF-8"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			id, err := key(order{ID: tt.id})
			if tt.target != nil {
				wantErr(t, id, err, tt.target, tt.msg)
				return
			}
			wantID(t, id, err, tt.want)
		})
	}
}

func TestFieldTooLongCarriesTheID(t *testing.T) {
	t.Parallel()
	_, err := idstrategy.Field("ID", orderID)(order{ID: megabyte})
	var long *idstrategy.TooLongError
	require.ErrorAs(t, err, &long)
	require.True(t, long.ID == megabyte, "TooLongError.ID is not the id")
	require.Equal(t, adapter.DefaultMaxIDLength, long.Limit)
	require.Less(t, len(err.Error()), 300, "the message should not contain the id")
}

func TestHeader(t *testing.T) {
	t.Parallel()
	key := idstrategy.Header("Message-Id", orderHeader)
	tests := []struct {
		name    string
		headers map[string]string
		want    string
		target  error
		msg     string
	}{
		{name: "present", headers: map[string]string{"Message-Id": "m-1"}, want: "m-1"},
		{name: "missing", headers: map[string]string{"Other": "x"}, target: dedup.ErrNoKey,
			msg: `idstrategy: header "Message-Id": dedup: message has no id: the header is missing`},
		{name: "no headers at all", headers: nil, target: dedup.ErrNoKey, msg: "the header is missing"},
		{name: "empty", headers: map[string]string{"Message-Id": ""}, target: dedup.ErrNoKey,
			msg: `idstrategy: header "Message-Id": dedup: message has no id: the header is empty`},
		{name: "a megabyte", headers: map[string]string{"Message-Id": megabyte}, target: dedup.ErrInvalidKey, msg: "over the limit"},
		{name: "invalid UTF-8", headers: map[string]string{"Message-Id": badUTF8}, target: dedup.ErrInvalidKey, msg: "not valid UTF-8"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			id, err := key(order{Headers: tt.headers})
			if tt.target != nil {
				wantErr(t, id, err, tt.target, tt.msg)
				return
			}
			wantID(t, id, err, tt.want)
		})
	}
}

func TestHeaderPassesItsNameToTheGetter(t *testing.T) {
	t.Parallel()
	var asked string
	key := idstrategy.Header("Idempotency-Key", func(_ order, name string) (string, bool) {
		asked = name
		return "k", true
	})
	id, err := key(order{})
	wantID(t, id, err, "k")
	require.Equal(t, "Idempotency-Key", asked)
}

type keyed struct{ key string }

func (k keyed) IdempotencyKey() string { return k.key }

type keyedPtr struct{ key string }

func (k *keyedPtr) IdempotencyKey() string { return k.key }

func TestMethod(t *testing.T) {
	t.Parallel()
	t.Run("value", func(t *testing.T) {
		t.Parallel()
		key := idstrategy.Method[keyed]()
		id, err := key(keyed{key: "k-1"})
		wantID(t, id, err, "k-1")
		id, err = key(keyed{})
		wantErr(t, id, err, dedup.ErrNoKey, "method IdempotencyKey", "empty")
		id, err = key(keyed{key: megabyte})
		wantErr(t, id, err, dedup.ErrInvalidKey, "over the limit")
		id, err = key(keyed{key: badUTF8})
		wantErr(t, id, err, dedup.ErrInvalidKey, "not valid UTF-8")
	})
	t.Run("pointer", func(t *testing.T) {
		t.Parallel()
		key := idstrategy.Method[*keyedPtr]()
		id, err := key(&keyedPtr{key: "k-2"})
		wantID(t, id, err, "k-2")
		id, err = key(nil)
		wantErr(t, id, err, dedup.ErrNoKey, "the message is nil")
	})
	t.Run("interface", func(t *testing.T) {
		t.Parallel()
		key := idstrategy.Method[idstrategy.IdempotencyKeyer]()
		id, err := key(keyed{key: "k-3"})
		wantID(t, id, err, "k-3")
		id, err = key(nil)
		wantErr(t, id, err, dedup.ErrNoKey, "the message is nil")
		var nilPtr *keyedPtr
		id, err = key(nilPtr)
		wantErr(t, id, err, dedup.ErrNoKey, "the message is nil")
	})
}
