package dedupamqp

import (
	"context"
	"net"
	"time"
)

// handshakeTimeout bounds the TCP connect and the AMQP handshake of a dial,
// as amqp091's own DefaultDial does.
const handshakeTimeout = 30 * time.Second

// dialContext is amqp.Config.Dial bound to ctx: the connect stops when ctx
// ends, and the handshake has a deadline (ctx's, when earlier), which
// amqp091 clears once the connection is open.
func dialContext(ctx context.Context) func(network, addr string) (net.Conn, error) {
	return func(network, addr string) (net.Conn, error) {
		d := net.Dialer{Timeout: handshakeTimeout}
		conn, err := d.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		deadline := time.Now().Add(handshakeTimeout)
		if dl, ok := ctx.Deadline(); ok && dl.Before(deadline) {
			deadline = dl
		}
		if err := conn.SetDeadline(deadline); err != nil {
			_ = conn.Close()
			return nil, err
		}
		return conn, nil
	}
}
