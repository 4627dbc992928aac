package dedupredisstream

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// maxClaimPages bounds the XAUTOCLAIM calls of one scan (each looks at
// up to ten times Batch pending entries), so that a long pending list
// costs several scans rather than one that never ends.
const maxClaimPages = 16

// maintain keeps the entries this consumer holds from going idle, and
// every ClaimInterval takes over the idle entries of others, reads the
// group's lag and removes dead consumers, until ctx ends.
func (c *Consumer[T, R]) maintain(ctx context.Context) {
	refreshEvery := max(c.opts.ClaimIdle/4, time.Millisecond)
	tick := time.NewTicker(min(refreshEvery, lockTTL/4))
	defer tick.Stop()
	c.scan(ctx)
	lastScan, lastRefresh := time.Now(), time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-tick.C:
			c.lock.refresh(ctx, c.client, c.opts.Logger)
			if now.Sub(lastRefresh) >= refreshEvery {
				c.refresh(ctx)
				lastRefresh = now
			}
			if now.Sub(lastScan) >= c.opts.ClaimInterval {
				c.scan(ctx)
				lastScan = time.Now()
			}
		}
	}
}

// refresh resets the idle time of the entries this consumer holds that
// have been idle half of ClaimIdle (takeScript: XCLAIM ... JUSTID, which
// counts no delivery), so that no other consumer takes them over while this
// one lives. Only half-idle ones: an entry another consumer took over after
// this one stalled has a short idle time, and stays with it. A held entry
// deleted from the stream is left pending: in a handler, its XACK ends it;
// waiting for a retry, takeUp reports it.
func (c *Consumer[T, R]) refresh(ctx context.Context) {
	ids := c.held.snapshot()
	for len(ids) > 0 && ctx.Err() == nil {
		n := min(len(ids), 256)
		err := takeScript.Run(ctx, c.client, []string{c.stream}, takeArgs(c.group, c.opts.Consumer, c.opts.ClaimIdle/2, ids[:n])...).Err()
		if err != nil && !errors.Is(err, redis.Nil) {
			if ctx.Err() == nil {
				c.opts.Logger.WarnContext(ctx, "dedupredisstream: the idle time of held entries not reset", slog.Any("error", err))
			}
			return
		}
		ids = ids[n:]
	}
}

func takeArgs(group, consumer string, minIdle time.Duration, ids []string) []any {
	args := make([]any, 0, 4+len(ids))
	args = append(args, group, consumer, minIdle.Milliseconds(), "0")
	for _, id := range ids {
		args = append(args, id)
	}
	return args
}

// scan takes over the entries other consumers left idle past ClaimIdle,
// reports those deleted from the stream meanwhile, reads the group's lag,
// and removes dead consumers.
func (c *Consumer[T, R]) scan(ctx context.Context) {
	c.claim(ctx)
	if ctx.Err() != nil {
		return
	}
	c.lag(ctx)
	c.removeDead(ctx)
}

// claim runs XAUTOCLAIM from the start of the pending list until its end,
// at most maxClaimPages calls. Its replies' third element lists the
// entries deleted from the stream while pending (Redis 7 removes them
// from the pending list as it goes): they are reported. The entries
// claimed go through takeUp, which makes them wait for a next-attempt
// time recorded by the consumer that held them.
func (c *Consumer[T, R]) claim(ctx context.Context) {
	start := "0-0"
	for range maxClaimPages {
		next, msgs, deleted, err := c.autoClaim(ctx, start)
		if err != nil {
			if ctx.Err() == nil && !isNoGroup(err) {
				c.opts.Logger.WarnContext(ctx, "dedupredisstream: claiming idle entries failed", slog.Any("error", err))
			}
			return
		}
		c.reportTrimmed(ctx, deleted, "XAUTOCLAIM")
		now := time.Now()
		for _, m := range msgs {
			if c.held.add(m.ID) {
				c.sched.add(&entry{id: m.ID, values: m.Values, fields: fieldsOf(m.Values), due: now})
			}
		}
		if next == "0-0" || next == "" {
			return
		}
		start = next
	}
}

// autoClaim is one XAUTOCLAIM, sent as a raw command: go-redis's XAutoClaim
// drops the reply's third element, the ids of the entries deleted from the
// stream while pending.
func (c *Consumer[T, R]) autoClaim(ctx context.Context, start string) (next string, msgs []redis.XMessage, deleted []string, err error) {
	reply, err := c.client.Do(ctx, "XAUTOCLAIM", c.stream, c.group, c.opts.Consumer,
		c.opts.ClaimIdle.Milliseconds(), start, "COUNT", c.opts.Batch).Slice()
	if err != nil {
		return "", nil, nil, err
	}
	return parseAutoClaim(reply)
}

// parseAutoClaim reads an XAUTOCLAIM reply: the next cursor, the claimed
// entries, and (Redis 7) the deleted ids.
func parseAutoClaim(reply []any) (next string, msgs []redis.XMessage, deleted []string, err error) {
	if len(reply) < 2 {
		return "", nil, nil, fmt.Errorf("dedupredisstream: XAUTOCLAIM replied %d elements", len(reply))
	}
	next = toString(reply[0])
	entries, _ := reply[1].([]any)
	for _, raw := range entries {
		pair, ok := raw.([]any)
		if !ok || len(pair) < 2 {
			continue
		}
		m := redis.XMessage{ID: toString(pair[0])}
		switch fv := pair[1].(type) {
		case []any:
			m.Values = make(map[string]any, len(fv)/2)
			for i := 0; i+1 < len(fv); i += 2 {
				m.Values[toString(fv[i])] = toString(fv[i+1])
			}
		case map[any]any:
			m.Values = make(map[string]any, len(fv))
			for k, v := range fv {
				m.Values[toString(k)] = toString(v)
			}
		}
		msgs = append(msgs, m)
	}
	if len(reply) > 2 {
		ids, _ := reply[2].([]any)
		for _, id := range ids {
			deleted = append(deleted, toString(id))
		}
	}
	return next, msgs, deleted, nil
}

// lag reads the group's lag (XINFO GROUPS) into Stats.
func (c *Consumer[T, R]) lag(ctx context.Context) {
	groups, err := c.client.XInfoGroups(ctx, c.stream).Result()
	if err != nil {
		return
	}
	for _, g := range groups {
		if g.Name == c.group {
			c.stats.lag.Store(g.Lag)
		}
	}
}

// removeDead removes from the group the consumers silent for
// DeadConsumerIdle that own no pending entry (XGROUP DELCONSUMER, in a
// script that checks they own nothing in the same step: a consumer's
// pending entries would be lost with it).
func (c *Consumer[T, R]) removeDead(ctx context.Context) {
	consumers, err := c.client.XInfoConsumers(ctx, c.stream, c.group).Result()
	if err != nil {
		return
	}
	for _, k := range consumers {
		if k.Name == c.opts.Consumer || k.Pending > 0 || k.Idle < c.opts.DeadConsumerIdle {
			continue
		}
		n, err := delConsumerScript.Run(ctx, c.client, []string{c.stream}, c.group, k.Name, c.opts.DeadConsumerIdle.Milliseconds()).Int()
		if err == nil && n > 0 {
			c.opts.Logger.InfoContext(ctx, "dedupredisstream: dead consumer removed from the group", slog.String("stream", c.stream),
				slog.String("group", c.group), slog.String("consumer", k.Name), slog.Duration("idle", k.Idle))
		}
	}
}

// delConsumerScript removes consumer ARGV[2] of group ARGV[1] when it owns
// no pending entry and has been idle for ARGV[3] ms at least, in one step;
// it returns 1 when it did.
var delConsumerScript = redis.NewScript(`
local cs = redis.call('XINFO', 'CONSUMERS', KEYS[1], ARGV[1])
for _, c in ipairs(cs) do
  local name, pending, idle
  for i = 1, #c, 2 do
    if c[i] == 'name' then name = c[i+1] elseif c[i] == 'pending' then pending = c[i+1] elseif c[i] == 'idle' then idle = c[i+1] end
  end
  if name == ARGV[2] then
    if pending ~= 0 or idle < tonumber(ARGV[3]) then return 0 end
    redis.call('XGROUP', 'DELCONSUMER', KEYS[1], ARGV[1], ARGV[2])
    return 1
  end
end
return 0
`)

// lockTTL is how long a consumer's name stays taken after its holder
// stopped refreshing it (a crash).
const lockTTL = 3 * time.Second

// nameLock keeps a consumer name to one live Consumer: a key, set with a
// token of this Consumer's and a TTL, refreshed while it runs.
type nameLock struct {
	key, token string
}

func lockToken() string {
	return strconv.FormatInt(time.Now().UnixNano(), 36) + "-" + strconv.FormatUint(randUint(), 36)
}

// acquire takes the name, waiting out a lock its crashed holder left (at
// most lockTTL and a bit), or fails with ErrConsumerInUse.
func (l *nameLock) acquire(ctx context.Context, client redis.UniversalClient) error {
	deadline := time.Now().Add(lockTTL + time.Second)
	for {
		ok, err := client.SetNX(ctx, l.key, l.token, lockTTL).Result()
		if err != nil {
			return fmt.Errorf("dedupredisstream: take the consumer name: %w", err)
		}
		if ok {
			return nil
		}
		if time.Now().After(deadline) {
			return &configError{sentinel: ErrConsumerInUse, msg: fmt.Sprintf("dedupredisstream: another live Consumer holds the name (%s): set Options.Consumer to a name of this process's own", l.key)}
		}
		if !sleep(ctx, 200*time.Millisecond) {
			return ctx.Err()
		}
	}
}

var lockRefreshScript = redis.NewScript(`if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('PEXPIRE', KEYS[1], ARGV[2]) end return 0`)
var lockReleaseScript = redis.NewScript(`if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0`)

func (l *nameLock) refresh(ctx context.Context, client redis.UniversalClient, logger *slog.Logger) {
	n, err := lockRefreshScript.Run(ctx, client, []string{l.key}, l.token, lockTTL.Milliseconds()).Int()
	if err == nil && n == 0 {
		// Lost (a Redis restarted without persistence, a pause past the
		// TTL): take it again if nobody else did.
		if ok, _ := client.SetNX(ctx, l.key, l.token, lockTTL).Result(); !ok {
			logger.ErrorContext(ctx, "dedupredisstream: another Consumer took this consumer's name", slog.String("lock", l.key))
		}
	}
}

func (l *nameLock) release(ctx context.Context, client redis.UniversalClient) {
	_ = lockReleaseScript.Run(ctx, client, []string{l.key}, l.token).Err()
}
