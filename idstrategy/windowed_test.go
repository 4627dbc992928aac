package idstrategy_test

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/dedup-go/dedup"
	"github.com/dedup-go/dedup/idstrategy"
)

func TestWindowed(t *testing.T) {
	t.Parallel()
	daily := idstrategy.Windowed(idstrategy.Field("ID", orderID), 24*time.Hour, orderAt)
	berlin := time.FixedZone("CEST", 2*60*60)
	tests := []keyCase[order]{
		{name: "start of the day", key: daily,
			in:   order{ID: "report", At: time.Date(2024, 5, 1, 0, 0, 0, 0, time.UTC)},
			want: "report@2024-05-01T00:00:00Z"},
		{name: "end of the day", key: daily,
			in:   order{ID: "report", At: time.Date(2024, 5, 1, 23, 59, 59, 999999999, time.UTC)},
			want: "report@2024-05-01T00:00:00Z"},
		{name: "next day", key: daily,
			in:   order{ID: "report", At: time.Date(2024, 5, 2, 0, 0, 0, 0, time.UTC)},
			want: "report@2024-05-02T00:00:00Z"},
		{name: "other time zone, same instant", key: daily,
			in:   order{ID: "report", At: time.Date(2024, 5, 2, 1, 30, 0, 0, berlin)},
			want: "report@2024-05-01T00:00:00Z"},
		{name: "id with @", key: daily,
			in:   order{ID: "a@b", At: time.Date(2024, 5, 1, 12, 0, 0, 0, time.UTC)},
			want: "a@b@2024-05-01T00:00:00Z"},
		{name: "hourly", key: idstrategy.Windowed(idstrategy.Field("ID", orderID), time.Hour, orderAt),
			in:   order{ID: "r", At: time.Date(2024, 5, 1, 13, 45, 0, 0, time.UTC)},
			want: "r@2024-05-01T13:00:00Z"},
		{name: "weekly starts on Monday", key: idstrategy.Windowed(idstrategy.Field("ID", orderID), 7*24*time.Hour, orderAt),
			in:   order{ID: "r", At: time.Date(2024, 5, 1, 13, 45, 0, 0, time.UTC)}, // a Wednesday
			want: "r@2024-04-29T00:00:00Z"},
		{name: "sub-second windows stay distinct", key: idstrategy.Windowed(idstrategy.Field("ID", orderID), 250*time.Millisecond, orderAt),
			in:   order{ID: "r", At: time.Date(2024, 5, 1, 0, 0, 0, 600_000_000, time.UTC)},
			want: "r@2024-05-01T00:00:00.5Z"},
		{name: "zero time", key: daily, in: order{ID: "r"}, target: dedup.ErrNoKey,
			msg: "idstrategy: windowed: dedup: message has no id: the message has no time"},
		{name: "inner has no id", key: daily, in: order{At: time.Now()}, target: dedup.ErrNoKey,
			msg: `idstrategy: windowed: field "ID": dedup: message has no id: the field is empty`},
		{name: "inner id invalid", key: daily, in: order{ID: badUTF8, At: time.Now()}, target: dedup.ErrInvalidKey,
			msg: "not valid UTF-8"},
		{name: "too long with the window", key: daily, in: order{ID: exactLimit[:500], At: time.Now()},
			target: dedup.ErrInvalidKey, msg: "idstrategy: windowed: dedup: invalid message id: the id is 521 bytes"},
	}
	runKeyCases(t, nil, tests)
}

func TestWindowedHashLong(t *testing.T) {
	t.Parallel()
	at := time.Date(2024, 5, 1, 12, 0, 0, 0, time.UTC)
	key := idstrategy.HashLong(idstrategy.Windowed(idstrategy.Field("ID", orderID), 24*time.Hour, orderAt), 100)
	id, err := key(order{ID: megabyte, At: at})
	// The window is part of what is hashed, so the next day is another id.
	wantID(t, id, err, hashOf(megabyte+"@2024-05-01T00:00:00Z"))
	next, err := key(order{ID: megabyte, At: at.Add(24 * time.Hour)})
	require.NoError(t, err)
	require.NotEqual(t, id, next)
}

func TestWindowedInnerErrors(t *testing.T) {
	t.Parallel()
	boom := errors.New("boom")
	key := idstrategy.Windowed(func(order) (string, error) { return "", boom }, time.Hour, orderAt)
	id, err := key(order{At: time.Now()})
	wantErr(t, id, err, dedup.ErrInvalidKey, "idstrategy: windowed: dedup: invalid message id: boom")
	require.ErrorIs(t, err, boom)

	// A hand-written inner returning "" must not make every message "@...".
	key = idstrategy.Windowed(func(order) (string, error) { return "", nil }, time.Hour, orderAt)
	id, err = key(order{At: time.Now()})
	wantErr(t, id, err, dedup.ErrNoKey, "empty id")
}
