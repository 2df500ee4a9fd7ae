// Package migrations holds the SQL migrations of every table eventpipe keeps
// in PostgreSQL (the inbox, the outbox, the specs' stores), embedded in the
// binary and applied with goose.
//
// Every table lives in one schema, DefaultSchema unless the caller names
// another — tests migrate a fresh schema each, River-style, so they can run in
// parallel against one database. goose's own version table lives in that
// schema too, so two schemas never share migration state. The SQL files use
// unqualified names: the migrations run on connections whose search_path is
// the target schema.
package migrations

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"hash/fnv"
	"io/fs"
	"path"
	"regexp"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/lock"
)

// DefaultSchema is the schema eventpipe's tables live in unless configured
// otherwise.
const DefaultSchema = "eventpipe"

// VersionTable is goose's bookkeeping table, created in the target schema.
const VersionTable = "goose_db_version"

//go:embed *.sql
var files embed.FS

// FS returns the embedded migration files, for tools that want to read them.
func FS() fs.FS { return files }

// validSchema is deliberately narrower than what PostgreSQL accepts: the
// schema name ends up in goose's table name and in NOTIFY channel names, where
// quoting would be easy to get wrong.
var validSchema = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,55}$`)

// ValidateSchema reports whether name can be used as eventpipe's schema: lower
// case letters, digits and underscores, not starting with a digit, at most 56
// bytes (so that "<schema>_outbox" still fits PostgreSQL's 63-byte names).
func ValidateSchema(name string) error {
	if !validSchema.MatchString(name) {
		return fmt.Errorf("schema %q: want lower-case letters, digits and underscores, starting with a letter or underscore, at most 56 bytes", name)
	}
	return nil
}

// SchemaOrDefault returns schema, or DefaultSchema when it is empty.
func SchemaOrDefault(schema string) string {
	if schema == "" {
		return DefaultSchema
	}
	return schema
}

// Result is one migration applied or rolled back.
type Result struct {
	// Version is the migration's number (the file name's prefix).
	Version int64
	// Name is the migration's file name.
	Name string
	// Direction is "up" or "down".
	Direction string
	// Duration is how long it ran.
	Duration time.Duration
}

// String formats r the way `eventpipe migrate` prints it.
func (r Result) String() string {
	return fmt.Sprintf("%-4s %s (%s)", r.Direction, r.Name, r.Duration.Round(time.Microsecond))
}

// Status is one migration's state in a schema.
type Status struct {
	// Version is the migration's number.
	Version int64
	// Name is the migration's file name.
	Name string
	// Applied reports whether the migration has been applied.
	Applied bool
	// AppliedAt is when it was applied (zero when pending).
	AppliedAt time.Time
}

// Up creates schema if needed and applies every pending migration to it, in
// order. Concurrent callers (several instances starting at once) serialize on
// an advisory lock of that schema. An empty schema means DefaultSchema.
func Up(ctx context.Context, pool *pgxpool.Pool, schema string) ([]Result, error) {
	return run(ctx, pool, schema, true, func(p *goose.Provider) ([]*goose.MigrationResult, error) {
		return p.Up(ctx)
	})
}

// Down rolls back the most recent applied migration of schema. It returns
// nothing when no migration is applied.
func Down(ctx context.Context, pool *pgxpool.Pool, schema string) ([]Result, error) {
	return run(ctx, pool, schema, false, func(p *goose.Provider) ([]*goose.MigrationResult, error) {
		r, err := p.Down(ctx)
		if errors.Is(err, goose.ErrNoNextVersion) {
			return nil, nil
		}
		if err != nil {
			return nil, err
		}
		return []*goose.MigrationResult{r}, nil
	})
}

// DownTo rolls back every applied migration of schema newer than version, newest
// first; version 0 rolls back all of them (the schema itself stays).
func DownTo(ctx context.Context, pool *pgxpool.Pool, schema string, version int64) ([]Result, error) {
	return run(ctx, pool, schema, false, func(p *goose.Provider) ([]*goose.MigrationResult, error) {
		return p.DownTo(ctx, version)
	})
}

// StatusOf lists every embedded migration with its state in schema, oldest
// first. A schema that does not exist yet reports every migration pending.
func StatusOf(ctx context.Context, pool *pgxpool.Pool, schema string) ([]Status, error) {
	schema = SchemaOrDefault(schema)
	if err := ValidateSchema(schema); err != nil {
		return nil, err
	}
	var exists bool
	if err := pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)`, schema).Scan(&exists); err != nil {
		return nil, fmt.Errorf("migrations status %s: %w", schema, err)
	}
	if !exists {
		var out []Status
		for _, f := range list() {
			out = append(out, Status{Version: f.version, Name: f.name})
		}
		return out, nil
	}
	db, p, err := provider(pool, schema)
	if err != nil {
		return nil, err
	}
	defer func() { _ = db.Close() }()
	st, err := p.Status(ctx)
	if err != nil {
		return nil, fmt.Errorf("migrations status %s: %w", schema, err)
	}
	out := make([]Status, 0, len(st))
	for _, s := range st {
		out = append(out, Status{
			Version:   s.Source.Version,
			Name:      path.Base(s.Source.Path),
			Applied:   s.State == goose.StateApplied,
			AppliedAt: s.AppliedAt,
		})
	}
	return out, nil
}

type file struct {
	version int64
	name    string
}

// list returns the embedded migrations in order, without a database.
func list() []file {
	entries, _ := fs.ReadDir(files, ".")
	var out []file
	for _, e := range entries {
		v, err := goose.NumericComponent(e.Name())
		if err != nil {
			continue
		}
		out = append(out, file{version: v, name: e.Name()})
	}
	return out
}

func run(ctx context.Context, pool *pgxpool.Pool, schema string, create bool, do func(*goose.Provider) ([]*goose.MigrationResult, error)) ([]Result, error) {
	schema = SchemaOrDefault(schema)
	if err := ValidateSchema(schema); err != nil {
		return nil, err
	}
	direction := "down"
	if create {
		direction = "up"
		// IF NOT EXISTS races harmlessly: two creators both succeed or one
		// gets a unique violation, which a retry of the CLI fixes; the
		// advisory lock below covers everything after.
		if _, err := pool.Exec(ctx, "CREATE SCHEMA IF NOT EXISTS "+pgx.Identifier{schema}.Sanitize()); err != nil {
			return nil, fmt.Errorf("migrate %s %s: create schema: %w", direction, schema, err)
		}
	}
	db, p, err := provider(pool, schema)
	if err != nil {
		return nil, err
	}
	defer func() { _ = db.Close() }()
	res, err := do(p)
	if pe := (*goose.PartialError)(nil); errors.As(err, &pe) {
		res = pe.Applied
	}
	out := make([]Result, 0, len(res))
	for _, r := range res {
		if r.Error != nil {
			continue
		}
		out = append(out, Result{Version: r.Source.Version, Name: path.Base(r.Source.Path), Direction: r.Direction, Duration: r.Duration})
	}
	if err != nil {
		return out, fmt.Errorf("migrate %s %s: %w", direction, schema, err)
	}
	return out, nil
}

// provider opens a database/sql handle on pool's server whose connections
// all have search_path = schema, so that the unqualified names of the SQL
// files land in schema. The caller closes db.
func provider(pool *pgxpool.Pool, schema string) (*sql.DB, *goose.Provider, error) {
	cc := pool.Config().ConnConfig.Copy()
	if cc.RuntimeParams == nil {
		cc.RuntimeParams = map[string]string{}
	}
	// public stays on the path for extension functions; new objects go to
	// the first schema.
	cc.RuntimeParams["search_path"] = pgx.Identifier{schema}.Sanitize() + ", public"
	db := stdlib.OpenDB(*cc)
	db.SetMaxOpenConns(2)

	h := fnv.New64a()
	_, _ = h.Write([]byte("eventpipe migrations " + schema))
	// One lock per schema: migrating a test's schema never waits for
	// another's. A waiter polls every second (goose's default is 5 s), for
	// up to 5 minutes.
	locker, err := lock.NewPostgresSessionLocker(
		lock.WithLockID(int64(h.Sum64()>>1)), //nolint:gosec // a lock id: any 63 bits do
		lock.WithLockTimeout(1, 300),
	)
	if err != nil {
		_ = db.Close()
		return nil, nil, fmt.Errorf("migrations: %w", err)
	}
	p, err := goose.NewProvider(goose.DialectPostgres, db, files,
		goose.WithTableName(schema+"."+VersionTable),
		goose.WithSessionLocker(locker),
		goose.WithDisableGlobalRegistry(true),
	)
	if err != nil {
		_ = db.Close()
		return nil, nil, fmt.Errorf("migrations: %w", err)
	}
	return db, p, nil
}
