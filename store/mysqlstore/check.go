package mysqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/go-sql-driver/mysql"
)

// column is a column of the table as the store needs it: its type
// (information_schema's DATA_TYPE), and the least length (characters or
// bytes) or fractional seconds precision it must have, when that matters.
type column struct {
	name  string
	types []string
	size  int64 // CHARACTER_MAXIMUM_LENGTH at least (0: any)
	exact bool  // size exactly
	frac  int64 // DATETIME_PRECISION exactly (0: not checked)
	want  string
}

// columns are those of schemaSQL.
var columns = []column{
	{name: "key", types: []string{"varbinary"}, size: MaxKeyLength, exact: true, want: "varbinary(3072), whose keys compare byte by byte (a collation, even a _bin one, would merge keys: case-insensitive ones merge Order-1 and order-1, PAD SPACE ones \"a\" and \"a \")"},
	{name: "state", types: []string{"varchar"}, size: 10, want: "varchar(10)"},
	{name: "token", types: []string{"binary"}, size: 16, exact: true, want: "binary(16)"},
	{name: "attempt", types: []string{"int"}, want: "int"},
	{name: "fingerprint", types: []string{"varbinary"}, size: MaxFingerprintLength, want: "varbinary(1024)"},
	{name: "result", types: []string{"longblob"}, want: "longblob"},
	{name: "last_error", types: []string{"text", "mediumtext", "longtext"}, want: "text"},
	{name: "lease_until", types: []string{"datetime"}, frac: 6, want: "datetime(6)"},
	{name: "expires_at", types: []string{"datetime"}, frac: 6, want: "datetime(6)"},
	{name: "created_at", types: []string{"datetime"}, frac: 6, want: "datetime(6)"},
	{name: "completed_at", types: []string{"datetime"}, frac: 6, want: "datetime(6)"},
	{name: "steps", types: []string{"longblob"}, want: "longblob"},
}

// check makes sure, within Options.Timeout, that the table fits the
// store: its database exists and the user may see it; it is an InnoDB
// table with the store's columns and their types (and no other column
// that an INSERT of the store would leave without a value against a NOT
// NULL constraint), a unique key on key alone (and no other), and the
// user may SELECT, INSERT, UPDATE and DELETE its rows. What does not fit
// is an ErrMisconfigured that names it; an error of the database is the
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
// (no database, no table) end the list.
func (s *Store) problems(ctx context.Context) ([]string, error) {
	t := s.cfg.table
	var (
		current sql.NullString
		user    string
	)
	if err := s.db.QueryRowContext(ctx, `SELECT DATABASE(), CURRENT_USER()`).Scan(&current, &user); err != nil {
		return nil, err
	}
	database := t.database
	if database == "" {
		if !current.Valid {
			return []string{"no database is selected: name one in the DSN, or qualify Options.Table (database.table)"}, nil
		}
		database = current.String
	}
	var n int
	if err := s.db.QueryRowContext(ctx, `SELECT COUNT(*) FROM information_schema.SCHEMATA WHERE SCHEMA_NAME = ?`, database).Scan(&n); err != nil {
		return nil, err
	}
	if n == 0 {
		return []string{fmt.Sprintf("database %q does not exist, or user %s has no privilege in it", database, user)}, nil
	}
	var kind, engine sql.NullString
	err := s.db.QueryRowContext(ctx, `SELECT TABLE_TYPE, ENGINE FROM information_schema.TABLES WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ?`, database, t.name).Scan(&kind, &engine)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return []string{fmt.Sprintf("it does not exist in database %q, or user %s has no privilege on it: create it with Options.Migrate, or apply Store.SchemaSQL (the README has the SQL)", database, user)}, nil
	case err != nil:
		return nil, err
	case kind.String != "BASE TABLE":
		return []string{fmt.Sprintf("%s.%s is not a table (%s)", database, t.name, kind.String)}, nil
	}

	var problems []string
	if !strings.EqualFold(engine.String, "InnoDB") {
		problems = append(problems, fmt.Sprintf("its engine is %s, the store needs InnoDB (row locks and transactions)", engine.String))
	}
	colProblems, err := s.columnProblems(ctx, database)
	if err != nil {
		return nil, err
	}
	problems = append(problems, colProblems...)
	keyProblems, err := s.keyProblems(ctx, database)
	if err != nil {
		return nil, err
	}
	problems = append(problems, keyProblems...)
	if len(colProblems) > 0 {
		// The probes of the privileges name the columns.
		return problems, nil
	}
	lacks, err := s.privileges(ctx)
	if err != nil {
		return nil, err
	}
	if len(lacks) > 0 {
		problems = append(problems, fmt.Sprintf("user %s lacks the privilege(s) %s on it: GRANT SELECT, INSERT, UPDATE, DELETE ON `%s`.`%s` TO %s",
			user, strings.Join(lacks, ", "), database, t.name, quoteUser(user)))
	}
	return problems, nil
}

// columnProblems compares the table's columns with the store's.
func (s *Store) columnProblems(ctx context.Context, database string) ([]string, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT COLUMN_NAME, DATA_TYPE, COLUMN_TYPE, COALESCE(COLLATION_NAME, ''),
	COALESCE(CHARACTER_MAXIMUM_LENGTH, 0), COALESCE(DATETIME_PRECISION, 0),
	IS_NULLABLE = 'NO' AND COLUMN_DEFAULT IS NULL AND EXTRA NOT LIKE '%auto_increment%' AND EXTRA NOT LIKE '%GENERATED%'
FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ? ORDER BY ORDINAL_POSITION`, database, s.cfg.table.name)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	type found struct {
		typ, full, collation string
		size, frac           int64
	}
	have := make(map[string]found)
	var problems []string
	for rows.Next() {
		var (
			name     string
			f        found
			required bool
		)
		if err := rows.Scan(&name, &f.typ, &f.full, &f.collation, &f.size, &f.frac, &required); err != nil {
			return nil, err
		}
		have[name] = f
		if required && !slices.ContainsFunc(columns, func(c column) bool { return c.name == name }) {
			problems = append(problems, fmt.Sprintf("column %s is NOT NULL without a default, and the store's INSERT does not set it", name))
		}
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	var missing []string
	for _, c := range columns {
		f, ok := have[c.name]
		if !ok {
			missing = append(missing, c.name)
			continue
		}
		fits := slices.Contains(c.types, f.typ) &&
			(c.size == 0 || f.size == c.size || (!c.exact && f.size > c.size)) &&
			(c.frac == 0 || f.frac == c.frac)
		if !fits {
			is := f.full
			if f.collation != "" {
				is += " COLLATE " + f.collation
			}
			problems = append(problems, fmt.Sprintf("column %s is %s, the store needs %s", c.name, is, c.want))
		}
	}
	switch {
	case len(missing) > 0 && !slices.ContainsFunc(missing, func(name string) bool { return !added(name) }):
		problems = append(problems, fmt.Sprintf("it lacks column(s) %s, which an earlier version did not have: upgrade it with Options.Migrate, or apply %s",
			strings.Join(missing, ", "), upgradeSQL(s.sql.table, missing)))
	case len(missing) > 0:
		problems = append(problems, fmt.Sprintf("it lacks column(s) %s (see Store.SchemaSQL)", strings.Join(missing, ", ")))
	}
	return problems, nil
}

// keyProblems checks the table's unique keys: one on key alone, whole
// (not a prefix of it), and no other, which a row of the store could
// break.
func (s *Store) keyProblems(ctx context.Context, database string) ([]string, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT INDEX_NAME, COUNT(*), MAX(COLUMN_NAME = 'key' AND SUB_PART IS NULL)
FROM information_schema.STATISTICS WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ? AND NON_UNIQUE = 0 GROUP BY INDEX_NAME ORDER BY INDEX_NAME`, database, s.cfg.table.name)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var (
		onKey  bool
		others []string
	)
	for rows.Next() {
		var (
			name  string
			parts int
			key   bool
		)
		if err := rows.Scan(&name, &parts, &key); err != nil {
			return nil, err
		}
		if parts == 1 && key {
			onKey = true
		} else {
			others = append(others, name)
		}
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	var problems []string
	if !onKey {
		problems = append(problems, "it has no primary key or unique key on the whole of key alone, which the claim's ON DUPLICATE KEY UPDATE needs")
	}
	if len(others) > 0 {
		problems = append(problems, fmt.Sprintf("it has unique key(s) %s besides the one on key, which the store's rows could break", strings.Join(others, ", ")))
	}
	return problems, nil
}

// privileges tries, without effect, each kind of statement the store runs
// on the table (each with a WHERE that no row meets), and returns the
// privileges the server refused.
func (s *Store) privileges(ctx context.Context) ([]string, error) {
	t := s.sql.table
	probes := []struct{ name, sql string }{
		{"SELECT", "SELECT `key`, " + recordCols + " FROM " + t + " LIMIT 0"},
		{"INSERT", "INSERT INTO " + t + " (`key`, state, token, attempt, fingerprint, result, last_error, lease_until, expires_at) SELECT '', 'failed', '', 0, '', NULL, '', NULL, " + now + " FROM DUAL WHERE FALSE"},
		{"UPDATE", "UPDATE " + t + " SET attempt = 0 WHERE FALSE"},
		{"DELETE", "DELETE FROM " + t + " WHERE FALSE"},
	}
	var lacks []string
	for _, p := range probes {
		_, err := s.db.ExecContext(ctx, p.sql)
		var myErr *mysql.MySQLError
		switch {
		case errors.As(err, &myErr) && (myErr.Number == 1142 || myErr.Number == 1143):
			lacks = append(lacks, p.name)
		case err != nil:
			return nil, err
		}
	}
	return lacks, nil
}

// quoteUser quotes CURRENT_USER()'s user@host for a GRANT.
func quoteUser(u string) string {
	i := strings.LastIndexByte(u, '@')
	if i < 0 {
		return u
	}
	return "'" + u[:i] + "'@'" + u[i+1:] + "'"
}
