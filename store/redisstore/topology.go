package redisstore

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"

	"github.com/redis/go-redis/v9"
)

// refreshTopology asks a Cluster client to reload its slot map after a
// call failed with err in a way that may mean the master it went to is
// gone: a network error or a timeout, or Redis saying the cluster is
// changing (CLUSTERDOWN, MOVED, ASK, READONLY, TRYAGAIN, MASTERDOWN,
// LOADING).
//
// go-redis reloads its map on MOVED and ASK, and otherwise every
// ClusterStateReloadInterval (a minute by default). A master that was
// killed answers no MOVED: its commands fail with network errors, and
// without this the client kept sending that shard's commands to the dead
// address for up to a minute after the cluster had failed over in
// seconds. ReloadState is lazy and coalesced in go-redis (a reload runs in
// the background, at most one at a time, 200ms apart), so calling it on
// every such failure costs nothing more during an outage. A single server
// or Sentinel's FailoverClient needs none: the latter asks the Sentinels
// for the master on every new connection.
func (s *Store) refreshTopology(err error) {
	cc, ok := s.client.(*redis.ClusterClient)
	if !ok || !topologyError(err) {
		return
	}
	cc.ReloadState(context.Background()) // go-redis ignores the context: the reload runs detached
}

// topologyError reports whether err may mean that the node a command went
// to no longer serves its slot.
func topologyError(err error) bool {
	var nerr net.Error
	switch {
	case err == nil, errors.Is(err, context.Canceled):
		return false
	case errors.As(err, &nerr), errors.Is(err, context.DeadlineExceeded),
		errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return true
	}
	var rerr redis.Error
	if !errors.As(err, &rerr) {
		return false
	}
	msg := rerr.Error()
	for _, prefix := range []string{"CLUSTERDOWN", "MOVED", "ASK", "READONLY", "TRYAGAIN", "MASTERDOWN", "LOADING"} {
		if strings.HasPrefix(msg, prefix) {
			return true
		}
	}
	return false
}
