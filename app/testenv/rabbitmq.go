package testenv

import (
	"context"
	"encoding/json"
	"errors"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	trequire "github.com/stretchr/testify/require"
)

// RabbitMQCtl runs a rabbitmqctl command against the local node and fails the
// test if it cannot. The tests administer the broker this way, so
// EVENTPIPE_TEST_RABBITMQ_URL must point at the local node.
func RabbitMQCtl(t testing.TB, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, "rabbitmqctl", append([]string{"--quiet"}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("rabbitmqctl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// RabbitMQVhost gives the test a RabbitMQ virtual host of its own, deleted when the
// test ends, and returns the AMQP URL into it. Queues, connections and
// DropConnections stay inside it, so tests of other packages sharing the
// broker are never touched.
func RabbitMQVhost(t testing.TB) (amqpURL, vhost string) {
	t.Helper()
	base, err := url.Parse(RabbitMQURL(t))
	trequire.NoError(t, err)
	user := base.User.Username()
	if user == "" {
		user = "guest"
	}

	vhost = "ept-" + strings.ToLower(watermill.NewShortUUID())
	// One rabbitmqctl call for the vhost and the user's permissions: each
	// call boots an Erlang VM, about a CPU-second.
	defs, err := json.Marshal(map[string]any{
		"vhosts": []map[string]string{{"name": vhost}},
		"permissions": []map[string]string{{
			"user": user, "vhost": vhost, "configure": ".*", "write": ".*", "read": ".*",
		}},
	})
	trequire.NoError(t, err)
	// rabbitmqctl runs as the rabbitmq user: it cannot read the test's
	// private temporary directory, nor (3.10) definitions on stdin.
	file, err := os.CreateTemp("", "eventpipe-vhost-*.json")
	trequire.NoError(t, err)
	t.Cleanup(func() { _ = os.Remove(file.Name()) })
	_, err = file.Write(defs)
	trequire.NoError(t, errors.Join(err, file.Chmod(0o644), file.Close()))
	t.Cleanup(func() { RabbitMQCtl(t, "delete_vhost", vhost) })
	RabbitMQCtl(t, "import_definitions", file.Name())

	base.Path = "/" + vhost
	base.RawPath = ""
	return base.String(), vhost
}
