package pgstore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"
)

// column is a column of the table as the store needs it: its name and
// its type as format_type spells it.
type column struct{ name, typ string }

// columns are those of createSQL.
var columns = []column{
	{"key", "text"},
	{"state", "text"},
	{"token", "uuid"},
	{"attempt", "integer"},
	{"fingerprint", "bytea"},
	{"result", "bytea"},
	{"last_error", "text"},
	{"lease_until", "timestamp with time zone"},
	{"expires_at", "timestamp with time zone"},
	{"created_at", "timestamp with time zone"},
	{"completed_at", "timestamp with time zone"},
	{"steps", "bytea"},
}

// check makes sure, within Options.Timeout, that the table fits the
// store: it exists, in a schema that exists and that the role may use,
// has the store's columns with their types (and no other column that an
// INSERT of the store would leave NULL against a NOT NULL constraint), a unique index on key alone, and the role may SELECT,
// INSERT, UPDATE and DELETE its rows. What does not fit is an
// ErrMisconfigured that names it; an error of the database is the
// store's usual one.
func (s *Store) check(ctx context.Context) error {
	cctx, cancel := context.WithTimeout(ctx, s.cfg.timeout)
	defer cancel()
	problems, err := s.problems(cctx)
	if err != nil {
		return s.fail(ctx, "check", "", err)
	}
	if len(problems) > 0 {
		return fmt.Errorf("%w: table %s: %s", ErrMisconfigured, s.cfg.table.plain, strings.Join(problems, "; "))
	}
	return nil
}

// problems lists what does not fit in the table; the first ones found
// (no schema, no table) end the list.
func (s *Store) problems(ctx context.Context) ([]string, error) {
	t := s.cfg.table
	var (
		user   string
		path   []string
		oid    uint32
		kind   string
		schema string
		usage  bool
	)
	if err := s.pool.QueryRow(ctx, `SELECT current_user::text, current_schemas(false)::text[]`, s.cfg.mode).Scan(&user, &path); err != nil {
		return nil, err
	}
	if t.schema != "" {
		err := s.pool.QueryRow(ctx, `SELECT has_schema_privilege(oid, 'USAGE') FROM pg_namespace WHERE nspname = $1::text`, s.cfg.mode, t.schema).Scan(&usage)
		if errors.Is(err, pgx.ErrNoRows) {
			return []string{fmt.Sprintf("schema %q does not exist", t.schema)}, nil
		}
		if err != nil {
			return nil, err
		}
		if !usage {
			return []string{fmt.Sprintf("role %q has no USAGE privilege on schema %q: GRANT USAGE ON SCHEMA %s TO %s", user, t.schema, pgx.Identifier{t.schema}.Sanitize(), pgx.Identifier{user}.Sanitize())}, nil
		}
		schema = t.schema
	}
	// The table in its schema, or the first of the search_path's schemas
	// that has one of its name.
	err := s.pool.QueryRow(ctx, `SELECT c.oid, c.relkind::text, n.nspname::text, has_schema_privilege(n.oid, 'USAGE')
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
LEFT JOIN unnest(current_schemas(false)) WITH ORDINALITY AS p(name, pos) ON p.name = n.nspname
WHERE c.relname = $1::text AND (n.nspname = $2::text OR ($2::text = '' AND p.pos IS NOT NULL))
ORDER BY p.pos LIMIT 1`, s.cfg.mode, t.name, schema).Scan(&oid, &kind, &schema, &usage)
	switch {
	case errors.Is(err, pgx.ErrNoRows) && t.schema == "":
		return []string{fmt.Sprintf("it does not exist in the search_path (%s) of role %q: create it with Options.Migrate, or apply Store.SchemaSQL (the README has the SQL)", strings.Join(path, ", "), user)}, nil
	case errors.Is(err, pgx.ErrNoRows):
		return []string{"it does not exist: create it with Options.Migrate, or apply Store.SchemaSQL (the README has the SQL)"}, nil
	case err != nil:
		return nil, err
	case kind != "r" && kind != "p":
		return []string{fmt.Sprintf("%s.%s is not a table (relkind %q)", schema, t.name, kind)}, nil
	case !usage:
		return []string{fmt.Sprintf("role %q has no USAGE privilege on schema %q", user, schema)}, nil
	}

	var problems []string
	rows, err := s.pool.Query(ctx, `SELECT a.attname::text, format_type(a.atttypid, a.atttypmod), a.attnotnull AND NOT a.atthasdef AND a.attidentity = '' AND a.attgenerated = ''
FROM pg_attribute a WHERE a.attrelid = $1::oid AND a.attnum > 0 AND NOT a.attisdropped ORDER BY a.attnum`, s.cfg.mode, oid)
	if err != nil {
		return nil, err
	}
	have := make(map[string]string)
	var name, typ string
	var required bool
	_, err = pgx.ForEachRow(rows, []any{&name, &typ, &required}, func() error {
		have[name] = typ
		if required && !slices.ContainsFunc(columns, func(c column) bool { return c.name == name }) {
			problems = append(problems, fmt.Sprintf("column %s is NOT NULL without a default, and the store's INSERT does not set it", name))
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	var missing []string
	for _, c := range columns {
		switch typ, ok := have[c.name]; {
		case !ok:
			missing = append(missing, c.name)
		case typ != c.typ:
			problems = append(problems, fmt.Sprintf("column %s is %s, the store needs %s", c.name, typ, c.typ))
		}
	}
	switch {
	case len(missing) > 0 && !slices.ContainsFunc(missing, func(c string) bool { return !slices.Contains(upgradeColumns, c) }):
		problems = append(problems, fmt.Sprintf("it lacks column(s) %s, which an earlier version did not have: upgrade it with Options.Migrate, or apply %s",
			strings.Join(missing, ", "), strings.Join(strings.Fields(s.sql.upgrade), " ")))
	case len(missing) > 0:
		problems = append(problems, fmt.Sprintf("it lacks column(s) %s (see Store.SchemaSQL)", strings.Join(missing, ", ")))
	}

	var unique, sel, ins, upd, del bool
	if err := s.pool.QueryRow(ctx, `SELECT EXISTS (
	SELECT FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = i.indkey[0]
	WHERE i.indrelid = $1::oid AND i.indisunique AND i.indisvalid AND i.indnkeyatts = 1 AND i.indpred IS NULL AND a.attname = 'key'),
has_table_privilege($1::oid, 'SELECT'), has_table_privilege($1::oid, 'INSERT'),
has_table_privilege($1::oid, 'UPDATE'), has_table_privilege($1::oid, 'DELETE')`, s.cfg.mode, oid).Scan(&unique, &sel, &ins, &upd, &del); err != nil {
		return nil, err
	}
	if !unique && have["key"] != "" {
		problems = append(problems, "it has no primary key or unique index on key alone, which the claim's ON CONFLICT (key) needs")
	}
	var lacks []string
	for _, p := range []struct {
		name string
		ok   bool
	}{{"SELECT", sel}, {"INSERT", ins}, {"UPDATE", upd}, {"DELETE", del}} {
		if !p.ok {
			lacks = append(lacks, p.name)
		}
	}
	if len(lacks) > 0 {
		problems = append(problems, fmt.Sprintf("role %q lacks the privilege(s) %s on it: GRANT SELECT, INSERT, UPDATE, DELETE ON %s TO %s",
			user, strings.Join(lacks, ", "), s.cfg.table.sql, pgx.Identifier{user}.Sanitize()))
	}
	return problems, nil
}
