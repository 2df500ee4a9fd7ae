// Package testenv finds the real services the integration tests talk to: the
// local PostgreSQL and RabbitMQ and the SQS emulator that `make services`
// starts. A test that needs a service that is not there fails (it never skips
// to green), with a message saying how to start it.
//
// Each address comes from an environment variable with a default that matches
// this project's scripts:
//
//	EVENTPIPE_TEST_POSTGRES_DSN   postgres://postgres@127.0.0.1:5432/test?sslmode=disable
//	EVENTPIPE_TEST_RABBITMQ_URL   amqp://guest:guest@127.0.0.1:5672/
//	EVENTPIPE_TEST_SQS_ENDPOINT   http://127.0.0.1:9324
package testenv

import (
	"net"
	"net/url"
	"os"
	"testing"
	"time"
)

// Defaults for the local services.
const (
	DefaultPostgresDSN = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"
	DefaultRabbitMQURL = "amqp://guest:guest@127.0.0.1:5672/"
	DefaultSQSEndpoint = "http://127.0.0.1:9324"
	// SQSRegion is the region the emulator expects (its ARNs use account
	// 000000000000 in us-east-1).
	SQSRegion = "us-east-1"
)

// PostgresDSN returns the DSN of the test PostgreSQL, failing the test if it is
// not reachable.
func PostgresDSN(t testing.TB) string {
	t.Helper()
	dsn := env("EVENTPIPE_TEST_POSTGRES_DSN", DefaultPostgresDSN)
	require(t, "PostgreSQL", dsn, "5432")
	return dsn
}

// RabbitMQURL returns the AMQP URL of the test RabbitMQ, failing the test if it
// is not reachable.
func RabbitMQURL(t testing.TB) string {
	t.Helper()
	u := env("EVENTPIPE_TEST_RABBITMQ_URL", DefaultRabbitMQURL)
	require(t, "RabbitMQ", u, "5672")
	return u
}

// SQSEndpoint returns the base URL of the SQS emulator, failing the test if it
// is not reachable.
func SQSEndpoint(t testing.TB) string {
	t.Helper()
	u := env("EVENTPIPE_TEST_SQS_ENDPOINT", DefaultSQSEndpoint)
	require(t, "the SQS emulator", u, "80")
	return u
}

func env(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}

func require(t testing.TB, service, rawURL, defaultPort string) {
	t.Helper()
	u, err := url.Parse(rawURL)
	if err != nil {
		t.Fatalf("%s address %q: %v", service, rawURL, err)
	}
	port := u.Port()
	if port == "" {
		port = defaultPort
	}
	addr := net.JoinHostPort(u.Hostname(), port)
	conn, err := net.DialTimeout("tcp", addr, 3*time.Second)
	if err != nil {
		t.Fatalf("%s is not reachable at %s (%v): this test needs the real service; run `make services` (or `make test`, which starts it)", service, addr, err)
	}
	_ = conn.Close()
}
