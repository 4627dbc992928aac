package pgstore

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"

	"github.com/dedup-go/dedup/store"
)

// scanPage is how many records one statement of Scan reads.
const scanPage = 500

// Get returns the record of key, in whatever state, with its step
// records, or an error matching store.ErrNotFound. A record is not found from its ExpiresAt on (a claim:
// from its lease end plus AbandonedTTL), by the database's clock, as
// Acquire sees it.
func (s *Store) Get(ctx context.Context, key string) (store.Record, error) {
	if err := checkKey("get", key); err != nil {
		return store.Record{}, err
	}
	if err := ctx.Err(); err != nil {
		return store.Record{}, errContext("get", key, err)
	}
	cctx, cancel := context.WithTimeout(ctx, s.cfg.timeout)
	defer cancel()
	rec, err := scanRecordSteps(s.pool.QueryRow(cctx, s.sql.get, s.cfg.mode, key))
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return store.Record{}, fmt.Errorf("pgstore: get %q: %w", key, store.ErrNotFound)
	case err != nil:
		return store.Record{}, s.fail(ctx, "get", key, err)
	}
	rec.Key = key
	return rec, nil
}

// scanRecord reads the recordCols of a row, after the columns before.
func scanRecord(r pgx.Row, before ...any) (store.Record, error) {
	var cols recordColumns
	if err := r.Scan(cols.dest(before)...); err != nil {
		return store.Record{}, err
	}
	return cols.record(), nil
}

// scanRecordSteps reads the recordCols of a row, after the columns
// before, and then its step records.
func scanRecordSteps(r pgx.Row, before ...any) (store.Record, error) {
	var (
		cols recordColumns
		log  []byte
	)
	if err := r.Scan(append(cols.dest(before), &log)...); err != nil {
		return store.Record{}, err
	}
	rec := cols.record()
	steps, err := decodeSteps(log)
	if err != nil {
		return store.Record{}, err
	}
	rec.Steps = steps
	return rec, nil
}

// Delete forgets key, whatever its state: a duplicate arriving later is
// processed again, and the holder of a deleted claim gets ErrLeaseLost
// (DeleteIf removes only what no one holds). Deleting an absent key is
// not an error.
func (s *Store) Delete(ctx context.Context, key string) error {
	if err := checkKey("delete", key); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return errContext("delete", key, err)
	}
	cctx, cancel := context.WithTimeout(ctx, s.cfg.timeout)
	defer cancel()
	_, err := s.pool.Exec(cctx, s.sql.del, s.cfg.mode, key)
	for again(cctx, err) {
		_, err = s.pool.Exec(cctx, s.sql.del, s.cfg.mode, key)
	}
	if err != nil {
		return s.fail(ctx, "delete", key, err)
	}
	return nil
}

// DeleteIf deletes the record of req.Key only when req allows its state
// (store.DeleteRequest), in one statement that locks the row, decides on
// it and deletes it: a claim made after the read is never deleted, and a
// claim committed while the statement waited for the row's lock is what
// it decides on. A lease has ended once the database's clock reads its
// end, as Acquire decides a takeover. A record kept is returned with
// deleted false; an absent or gone key is an error matching
// store.ErrNotFound.
func (s *Store) DeleteIf(ctx context.Context, req store.DeleteRequest) (bool, store.Record, error) {
	if err := checkKey("delete", req.Key); err != nil {
		return false, store.Record{}, err
	}
	if err := ctx.Err(); err != nil {
		return false, store.Record{}, errContext("delete", req.Key, err)
	}
	states := make([]string, 0, 3)
	for _, st := range req.States {
		states = append(states, st.String())
	}
	if len(req.States) == 0 {
		states = append(states, store.StateCompleted.String(), store.StateFailed.String())
	}
	cctx, cancel := context.WithTimeout(ctx, s.cfg.timeout)
	defer cancel()
	var deleted bool
	query := func() (store.Record, error) {
		return scanRecord(s.pool.QueryRow(cctx, s.sql.deleteIf, s.cfg.mode, req.Key, states, req.ExpiredLease), &deleted)
	}
	rec, err := query()
	for again(cctx, err) {
		rec, err = query()
	}
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return false, store.Record{}, fmt.Errorf("pgstore: delete %q: %w", req.Key, store.ErrNotFound)
	case err != nil:
		return false, store.Record{}, s.fail(ctx, "delete", req.Key, err)
	}
	rec.Key = req.Key
	return deleted, rec, nil
}

// Scan yields every record whose key starts with prefix and that is not
// gone, with its step records, in key order, reading pages of 500 by primary key (a range of
// the index, never the whole table). A record written or expiring during
// the scan may be missed or seen. Options.Timeout bounds each page, not
// the whole scan. A failure (or the end of ctx) is yielded once, as a zero
// Record with the error, and ends the scan; so does the caller breaking
// out of its loop.
func (s *Store) Scan(ctx context.Context, prefix string) iter.Seq2[store.Record, error] {
	return func(yield func(store.Record, error) bool) {
		if !utf8.ValidString(prefix) {
			yield(store.Record{}, fmt.Errorf("pgstore: scan %q: %w: the prefix is not valid UTF-8", prefix, store.ErrInvalidKey))
			return
		}
		var upper *string
		if u, ok := successor(prefix); ok {
			upper = &u
		}
		after := ""
		for {
			if err := ctx.Err(); err != nil {
				yield(store.Record{}, errContext("scan", prefix, err))
				return
			}
			page, err := s.scanPage(ctx, prefix, after, upper)
			if err != nil {
				yield(store.Record{}, s.fail(ctx, "scan", prefix, err))
				return
			}
			for _, rec := range page {
				if !yield(rec, nil) {
					return
				}
			}
			if len(page) < scanPage {
				return
			}
			after = page[len(page)-1].Key
		}
	}
}

func (s *Store) scanPage(ctx context.Context, prefix, after string, upper *string) ([]store.Record, error) {
	cctx, cancel := context.WithTimeout(ctx, s.cfg.timeout)
	defer cancel()
	rows, err := s.pool.Query(cctx, s.sql.scan, s.cfg.mode, prefix, after, upper, scanPage)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var page []store.Record
	for rows.Next() {
		var key string
		rec, err := scanRecordSteps(rows, &key)
		if err != nil {
			return nil, err
		}
		rec.Key = key
		page = append(page, rec)
	}
	return page, rows.Err()
}

// successor returns the least string greater than every string that
// starts with prefix, in byte order (which is code point order for
// UTF-8), or false when there is none (an empty prefix, or one of only
// U+10FFFF). It replaces the last code point that can grow with the next
// one, skipping the surrogates, which UTF-8 cannot hold.
func successor(prefix string) (string, bool) {
	runes := []rune(prefix)
	for i := len(runes) - 1; i >= 0; i-- {
		r := runes[i] + 1
		if r >= 0xD800 && r <= 0xDFFF {
			r = 0xE000
		}
		if r <= utf8.MaxRune {
			return string(runes[:i]) + string(r), true
		}
	}
	return "", false
}
