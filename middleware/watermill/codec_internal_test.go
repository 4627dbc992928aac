package dedupwatermill

import (
	"testing"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"
)

func TestCodecRoundTrip(t *testing.T) {
	a := message.NewMessage("u1", []byte("payload"))
	a.Metadata.Set("k", "v")
	a.Metadata.Set("", "empty key")
	b := message.NewMessage("u2", nil)
	data, err := codec{}.Marshal(&produced{msgs: []*message.Message{a, b}})
	require.NoError(t, err)
	require.Equal(t, keptSize([]*message.Message{a, b}), len(data))
	var p *produced
	require.NoError(t, codec{}.Unmarshal(data, &p))
	require.Len(t, p.msgs, 2)
	require.Equal(t, "u1", p.msgs[0].UUID)
	require.Equal(t, []byte("payload"), []byte(p.msgs[0].Payload))
	require.Equal(t, a.Metadata, p.msgs[0].Metadata)
	require.Equal(t, "u2", p.msgs[1].UUID)
	for cut := range len(data) {
		var q *produced
		require.Error(t, codec{}.Unmarshal(data[:cut], &q), "cut at %d", cut)
	}
}

// TestTakeCopiesForEverySharer: duplicates inside one process share the
// first delivery's value; the first to take its messages gets them, every
// later one gets copies (same UUID, payload and metadata, other messages),
// so that two publishes never share (and the router never acks or
// mutates) one *message.Message.
func TestTakeCopiesForEverySharer(t *testing.T) {
	a := message.NewMessage("u1", []byte("payload"))
	a.Metadata.Set("k", "v")
	p := &produced{msgs: []*message.Message{a}}
	first := p.take()
	require.Same(t, a, first[0])
	for range 2 {
		again := p.take()
		require.Len(t, again, 1)
		require.NotSame(t, a, again[0], "a later taker got the first one's message")
		require.Equal(t, a.UUID, again[0].UUID)
		require.Equal(t, a.Payload, again[0].Payload)
		require.Equal(t, "v", again[0].Metadata.Get("k"))
	}
}
