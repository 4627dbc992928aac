package idstrategy_test

import (
	"errors"
	"testing"

	"github.com/dedup-go/dedup"
	"github.com/dedup-go/dedup/idstrategy"
)

func TestFirstOf(t *testing.T) {
	t.Parallel()
	key := idstrategy.FirstOf(
		idstrategy.Header("Message-Id", orderHeader),
		idstrategy.Field("ID", orderID),
		idstrategy.ContentHash(orderBody),
	)
	tests := []keyCase[order]{
		{name: "header first", in: order{Headers: map[string]string{"Message-Id": "h"}, ID: "f", Body: []byte("b")}, want: "h"},
		{name: "field when the header is missing", in: order{ID: "f", Body: []byte("b")}, want: "f"},
		{name: "field when the header is empty", in: order{Headers: map[string]string{"Message-Id": ""}, ID: "f"}, want: "f"},
		{name: "hash last", in: order{Body: []byte("hello")},
			want: "sha256:2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824"},
		{name: "nothing anywhere", in: order{}, target: dedup.ErrNoKey,
			msg: `idstrategy: first of: dedup: message has no id: none of 3 strategies found one: ` +
				`header "Message-Id": the header is missing; field "ID": the field is empty; content hash: the body is empty`},
		// A broken id is not skipped: the producer meant it as the id.
		{name: "long header does not fall back", in: order{Headers: map[string]string{"Message-Id": megabyte}, ID: "f"},
			target: dedup.ErrInvalidKey, msg: `idstrategy: first of, strategy 1 of 3: header "Message-Id": dedup: invalid message id: the id is 1048576 bytes`},
		{name: "invalid field does not fall back", in: order{ID: badUTF8, Body: []byte("b")},
			target: dedup.ErrInvalidKey, msg: `strategy 2 of 3: field "ID"`},
	}
	runKeyCases(t, key, tests)
}

func TestFirstOfHandWrittenStrategies(t *testing.T) {
	t.Parallel()
	boom := errors.New("boom")
	tests := []struct {
		name   string
		first  dedup.KeyFunc[order]
		want   string
		target error
		msg    string
	}{
		{name: "empty id counts as none", first: func(order) (string, error) { return "", nil }, want: "fallback"},
		{name: "ErrNoKey wrapped by the user", first: func(order) (string, error) { return "", errors.Join(dedup.ErrNoKey, boom) }, want: "fallback"},
		{name: "other errors stop", first: func(order) (string, error) { return "", boom },
			target: dedup.ErrInvalidKey, msg: "strategy 1 of 2: dedup: invalid message id: boom"},
		{name: "unchecked long id", first: func(order) (string, error) { return megabyte, nil },
			target: dedup.ErrInvalidKey, msg: "idstrategy: first of: dedup: invalid message id: the id is 1048576 bytes"},
		{name: "unchecked invalid id", first: func(order) (string, error) { return badUTF8, nil },
			target: dedup.ErrInvalidKey, msg: "not valid UTF-8"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			key := idstrategy.FirstOf(tt.first, func(order) (string, error) { return "fallback", nil })
			id, err := key(order{})
			if tt.target != nil {
				wantErr(t, id, err, tt.target, tt.msg)
				return
			}
			wantID(t, id, err, tt.want)
		})
	}
}

func TestFirstOfHashLong(t *testing.T) {
	t.Parallel()
	// Hashing the header makes a long header usable instead of an error.
	key := idstrategy.FirstOf(
		idstrategy.HashLong(idstrategy.Header("Message-Id", orderHeader), 128),
		idstrategy.Field("ID", orderID),
	)
	id, err := key(order{Headers: map[string]string{"Message-Id": megabyte}, ID: "f"})
	wantID(t, id, err, hashOf(megabyte))
}
