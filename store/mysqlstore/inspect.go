package mysqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"iter"

	"github.com/dedup-go/dedup/store"
)

// scanPage is how many records one statement of Scan reads.
const scanPage = 500

// Get returns the record of key, in whatever state, with its step
// records, or an error matching
// store.ErrNotFound. A record is not found from its ExpiresAt on (a claim:
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
	st, err := s.stmt(cctx, s.sql.get)
	var r row
	if err == nil {
		r, err = scanRecord(st.QueryRowContext(cctx, []byte(key)))
	}
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return store.Record{}, fmt.Errorf("mysqlstore: get %q: %w", key, store.ErrNotFound)
	case err != nil:
		return store.Record{}, s.fail(ctx, "get", key, err)
	}
	return r.rec, nil
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
	_, err := s.exec(cctx, s.sql.del, []byte(key))
	for s.again(cctx, err) {
		_, err = s.exec(cctx, s.sql.del, []byte(key))
	}
	if err != nil {
		return s.fail(ctx, "delete", key, err)
	}
	return nil
}

// DeleteIf deletes the record of req.Key only when req allows its state
// (store.DeleteRequest), in one short transaction that locks the row
// (SELECT ... FOR UPDATE, which reads its latest version, waiting for a
// concurrent claim to commit), decides on it by the database's clock of
// that read, and deletes it: a claim made after the read is never
// deleted. A record kept is returned with deleted false; an absent or gone
// key is an error matching store.ErrNotFound.
func (s *Store) DeleteIf(ctx context.Context, req store.DeleteRequest) (bool, store.Record, error) {
	if err := checkKey("delete", req.Key); err != nil {
		return false, store.Record{}, err
	}
	if err := ctx.Err(); err != nil {
		return false, store.Record{}, errContext("delete", req.Key, err)
	}
	cctx, cancel := context.WithTimeout(ctx, s.cfg.timeout)
	defer cancel()
	var (
		deleted bool
		r       row
		found   bool
	)
	run := func() error {
		deleted, found = false, false
		tx, err := s.db.BeginTx(cctx, nil)
		if err != nil {
			return err
		}
		defer func() { _ = tx.Rollback() }()
		r, err = scanRow(tx.QueryRowContext(cctx, s.sql.lockRow, []byte(req.Key)), true)
		switch {
		case errors.Is(err, sql.ErrNoRows):
			return tx.Commit()
		case err != nil:
			return err
		}
		if !r.now.Before(r.expires) {
			return tx.Commit()
		}
		found = true
		if req.Allows(r.rec, r.now) {
			if _, err := tx.ExecContext(cctx, s.sql.del, []byte(req.Key)); err != nil {
				return err
			}
			deleted = true
		}
		return tx.Commit()
	}
	err := run()
	for s.again(cctx, err) {
		err = run()
	}
	switch {
	case err != nil:
		return false, store.Record{}, s.fail(ctx, "delete", req.Key, err)
	case !found:
		return false, store.Record{}, fmt.Errorf("mysqlstore: delete %q: %w", req.Key, store.ErrNotFound)
	}
	return deleted, r.rec, nil
}

// Scan yields every record whose key starts with prefix and that is not
// gone, with its step records, in key order (byte order), reading pages of 500 by primary key (a
// range of the index, never the whole table). A record written or
// expiring during the scan may be missed or seen. Options.Timeout bounds
// each page, not the whole scan. A failure (or the end of ctx) is yielded
// once, as a zero Record with the error, and ends the scan; so does the
// caller breaking out of its loop.
func (s *Store) Scan(ctx context.Context, prefix string) iter.Seq2[store.Record, error] {
	return func(yield func(store.Record, error) bool) {
		upper, bounded := successor(prefix)
		after, first := prefix, true
		for {
			if err := ctx.Err(); err != nil {
				yield(store.Record{}, errContext("scan", prefix, err))
				return
			}
			page, err := s.scanPage(ctx, after, first, upper, bounded)
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
			after, first = page[len(page)-1].Key, false
		}
	}
}

func (s *Store) scanPage(ctx context.Context, after string, first bool, upper string, bounded bool) ([]store.Record, error) {
	cctx, cancel := context.WithTimeout(ctx, s.cfg.timeout)
	defer cancel()
	args := []any{[]byte(after)}
	if bounded {
		args = append(args, []byte(upper))
	}
	args = append(args, scanPage)
	rows, err := s.query(cctx, s.sql.scan(first, bounded), args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var page []store.Record
	for rows.Next() {
		r, err := scanRecord(rows)
		if err != nil {
			return nil, err
		}
		page = append(page, r.rec)
	}
	return page, rows.Err()
}

// successor returns the least byte string greater than every string that
// starts with prefix, or false when there is none (an empty prefix, or
// one of 0xFF bytes only): the prefix without its trailing 0xFF bytes,
// its last byte plus one. The key column compares bytes as they are.
func successor(prefix string) (string, bool) {
	b := []byte(prefix)
	for i := len(b) - 1; i >= 0; i-- {
		if b[i] < 0xFF {
			b[i]++
			return string(b[:i+1]), true
		}
	}
	return "", false
}
