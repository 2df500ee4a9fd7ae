package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"net/url"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/eventpipe/eventpipe/app/broker/postgres"
	"github.com/eventpipe/eventpipe/app/testenv"
)

// The package's tests share one database, created on first use, and put their
// tables in a schema of their own run, dropped at the end; topics are unique
// per test.
const testDatabase = "eventpipe_broker_pg"

var (
	// runTag tells this run's schema and connections from those of other
	// runs of the same tests (another engineer, CI) on the same server.
	runTag    = strings.ToLower(watermill.NewShortUUID())[:10]
	runSchema = fmt.Sprintf("run_%d_%s", time.Now().Unix(), runTag)

	setupOnce sync.Once
	setupErr  error
	dbDSN     string
)

func TestMain(m *testing.M) {
	code := m.Run()
	if dbDSN != "" {
		if err := dropSchema(dbDSN, runSchema); err != nil {
			fmt.Fprintf(os.Stderr, "drop test schema %s: %v\n", runSchema, err)
		}
	}
	os.Exit(code)
}

// testDSN returns the DSN of the package's database, creating it if needed.
// It fails (never skips) the test when PostgreSQL is not there.
func testDSN(t testing.TB) string {
	t.Helper()
	base := testenv.PostgresDSN(t)
	setupOnce.Do(func() {
		dbDSN, setupErr = ensureDatabase(base)
		if setupErr == nil {
			setupErr = dropStaleSchemas(dbDSN)
		}
	})
	require.NoError(t, setupErr, "set up test database %s", testDatabase)
	return dbDSN
}

// ensureDatabase creates the test database unless it exists. Concurrent test
// runs may race to create it; the loser sees "already exists", which is fine.
func ensureDatabase(base string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, base)
	if err != nil {
		return "", err
	}
	defer conn.Close(ctx)
	var exists bool
	if err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)`, testDatabase).Scan(&exists); err != nil {
		return "", err
	}
	if !exists {
		_, err := conn.Exec(ctx, `CREATE DATABASE `+pgx.Identifier{testDatabase}.Sanitize())
		var pgErr *pgconn.PgError
		alreadyExists := errors.As(err, &pgErr) && (pgErr.Code == "42P04" || pgErr.Code == "23505")
		if err != nil && !alreadyExists {
			return "", err
		}
	}
	return withDatabase(base, testDatabase)
}

func withDatabase(dsn, db string) (string, error) {
	if strings.HasPrefix(dsn, "postgres://") || strings.HasPrefix(dsn, "postgresql://") {
		u, err := url.Parse(dsn)
		if err != nil {
			return "", err
		}
		u.Path = "/" + db
		return u.String(), nil
	}
	return dsn + " dbname=" + db, nil // key=value form: the last setting wins
}

var runSchemaName = regexp.MustCompile(`^run_(\d+)_[a-z0-9]+$`)

// dropStaleSchemas removes what killed runs left behind.
func dropStaleSchemas(dsn string) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, `SELECT nspname FROM pg_namespace WHERE nspname LIKE 'run\_%'`)
	if err != nil {
		return err
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return err
	}
	for _, name := range names {
		m := runSchemaName.FindStringSubmatch(name)
		if m == nil {
			continue
		}
		started, _ := strconv.ParseInt(m[1], 10, 64)
		if time.Since(time.Unix(started, 0)) > 6*time.Hour {
			if _, err := conn.Exec(ctx, `DROP SCHEMA IF EXISTS `+pgx.Identifier{name}.Sanitize()+` CASCADE`); err != nil {
				return err
			}
		}
	}
	return nil
}

func dropSchema(dsn, schema string) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, `DROP SCHEMA IF EXISTS `+pgx.Identifier{schema}.Sanitize()+` CASCADE`)
	return err
}

// appName is the application_name of every connection a test's PubSubs open,
// unique to the test and the run, so that dropConnections cuts exactly those.
func appName(t testing.TB) string {
	h := fnv.New64a()
	_, _ = h.Write([]byte(t.Name()))
	return fmt.Sprintf("ept-%s-%016x", runTag, h.Sum64())
}

// testConfig is the configuration tests start from: the defaults, plus the
// run's schema, the test's application name, created tables, and a consuming
// pool small enough for many parallel tests on one server with
// max_connections 100 (a test rarely has more than a few subscriptions).
func testConfig(t testing.TB) postgres.Config {
	return postgres.Config{
		DSN:                  testDSN(t),
		ApplicationName:      appName(t),
		Schema:               runSchema,
		AutoInitializeSchema: true,
		MaxConns:             5,
	}
}

func newPubSub(t testing.TB, cfg postgres.Config) *postgres.PubSub {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ps, err := postgres.New(ctx, cfg, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = ps.Close() })
	return ps
}

// dropConnections terminates every backend of this test's PubSubs, and only
// those, and fails if there was none to cut.
func dropConnections(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, testDSN(t))
	require.NoError(t, err)
	defer conn.Close(ctx)
	var terminated int
	err = conn.QueryRow(ctx, `SELECT count(*) FILTER (WHERE pg_terminate_backend(pid))
		FROM pg_stat_activity WHERE application_name = $1`, appName(t)).Scan(&terminated)
	require.NoError(t, err)
	require.Positive(t, terminated, "no connection of %s to drop", appName(t))
	t.Logf("terminated %d backends of %s", terminated, appName(t))
}
