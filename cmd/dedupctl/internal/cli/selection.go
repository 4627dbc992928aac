package cli

import (
	"context"
	"slices"
	"strings"

	"github.com/dedup-go/dedup/store"
)

// selection is which records scan, stats and a bulk forget read: those of
// a namespace (all when empty), whose id starts with idPrefix, in states
// (all when empty).
type selection struct {
	namespace string
	idPrefix  string
	states    []store.State
}

// parseStates reads --state values (each may be a comma list).
func parseStates(vals []string) ([]store.State, error) {
	var states []store.State
	for _, v := range vals {
		for name := range strings.SplitSeq(v, ",") {
			var st store.State
			switch strings.TrimSpace(name) {
			case "processing":
				st = store.StateProcessing
			case "completed":
				st = store.StateCompleted
			case "failed":
				st = store.StateFailed
			default:
				return nil, usageErrorf("--state %q: want processing, completed or failed", name)
			}
			if !slices.Contains(states, st) {
				states = append(states, st)
			}
		}
	}
	return states, nil
}

// prefix is the key prefix the store scans: the namespace and id prefix
// when a namespace is given, else every key (the id prefix is then
// matched here, in every namespace).
func (s selection) prefix() string {
	if s.namespace == "" {
		return ""
	}
	return s.namespace + ":" + s.idPrefix
}

// matches reports whether rec, one of the store's scan of prefix(), is
// selected.
func (s selection) matches(rec store.Record) bool {
	if len(s.states) > 0 && !slices.Contains(s.states, rec.State) {
		return false
	}
	if s.namespace == "" && s.idPrefix != "" {
		_, id := splitKey(rec.Key)
		return strings.HasPrefix(id, s.idPrefix)
	}
	return true
}

// scan calls fn for every selected record, in the store's order (key
// order on PostgreSQL, Redis's own on Redis), until fn returns false or
// an error; p counts every record the store yields, selected or not. A
// store's failure names where.
func (s selection) scan(ctx context.Context, ins store.Inspector, where string, p *progress, fn func(store.Record) (bool, error)) error {
	for rec, err := range ins.Scan(ctx, s.prefix()) {
		if err != nil {
			return storeError(where, "", err)
		}
		p.add(1)
		if !s.matches(rec) {
			continue
		}
		more, err := fn(rec)
		if err != nil || !more {
			return err
		}
	}
	return nil
}
