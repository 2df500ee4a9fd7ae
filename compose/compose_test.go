package compose_test

import (
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/compose-spec/compose-go/v2/loader"
	"github.com/compose-spec/compose-go/v2/types"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventpipe/eventpipe/app/broker/rabbitmq"
	"github.com/eventpipe/eventpipe/app/topology"
	"github.com/eventpipe/eventpipe/config"
)

// loadProject parses docker-compose.yml as `docker compose` would, with the
// compose directory as the project directory and an empty environment, so the
// test process's variables cannot change the result.
func loadProject(t *testing.T) *types.Project {
	t.Helper()
	dir, err := filepath.Abs(".")
	require.NoError(t, err)
	project, err := loader.LoadWithContext(t.Context(), types.ConfigDetails{
		WorkingDir:  dir,
		ConfigFiles: []types.ConfigFile{{Filename: filepath.Join(dir, "docker-compose.yml")}},
		Environment: types.Mapping{},
	})
	require.NoError(t, err)
	return project
}

// published returns the host ports a service publishes, keyed by container
// port, and fails unless each is bound to loopback only.
func published(t *testing.T, svc types.ServiceConfig) map[uint32]string {
	t.Helper()
	ports := map[uint32]string{}
	for _, p := range svc.Ports {
		assert.Equal(t, "127.0.0.1", p.HostIP, "%s: port %d must be published on loopback only", svc.Name, p.Target)
		ports[p.Target] = p.Published
	}
	return ports
}

func TestComposeServices(t *testing.T) {
	t.Parallel()
	project := loadProject(t)
	assert.Equal(t, "eventpipe", project.Name)
	assert.ElementsMatch(t, []string{"rabbitmq", "rabbitmq-topology", "postgres", "sqs"}, project.ServiceNames())

	tests := []struct {
		service string
		ports   map[uint32]string // container port → published host port
		volume  string            // the named volume the service keeps its state in
	}{
		{service: "rabbitmq", ports: map[uint32]string{5672: "5672", 15672: "15672"}, volume: "rabbitmq-data"},
		{service: "postgres", ports: map[uint32]string{5432: "5432"}, volume: "postgres-data"},
		{service: "sqs", ports: map[uint32]string{9324: "9324"}, volume: "fauxqs-modules"},
	}
	for _, tt := range tests {
		t.Run(tt.service, func(t *testing.T) {
			t.Parallel()
			svc, err := project.GetService(tt.service)
			require.NoError(t, err)

			assert.Equal(t, tt.ports, published(t, svc))

			image, tag, ok := strings.Cut(svc.Image, ":")
			assert.True(t, ok && tag != "" && tag != "latest", "%s: image %q must have a pinned tag", tt.service, svc.Image)
			assert.NotEmpty(t, image)

			hc := svc.HealthCheck
			require.NotNil(t, hc, "%s: healthcheck", tt.service)
			assert.False(t, hc.Disable, "%s: healthcheck disabled", tt.service)
			require.GreaterOrEqual(t, len(hc.Test), 2, "%s: healthcheck test", tt.service)
			assert.Equal(t, "CMD", hc.Test[0], "%s: healthcheck in exec form", tt.service)
			assert.NotNil(t, hc.Interval, "%s: healthcheck interval", tt.service)
			assert.NotNil(t, hc.Retries, "%s: healthcheck retries", tt.service)

			var named []string
			for _, v := range svc.Volumes {
				if v.Type == types.VolumeTypeVolume {
					named = append(named, v.Source)
				}
			}
			assert.Contains(t, named, tt.volume)
			assert.Contains(t, project.Volumes, tt.volume, "volume %s declared at the top level", tt.volume)
		})
	}
}

// TestSQSEmulator checks the emulator is the one the tests run (fauxqs
// 2.4.1 on Node 22, decision 0004), on the port everything else expects.
func TestSQSEmulator(t *testing.T) {
	t.Parallel()
	svc, err := loadProject(t).GetService("sqs")
	require.NoError(t, err)
	command := strings.Join(svc.Command, " ")
	assert.Contains(t, command, "fauxqs@2.4.1")
	assert.Contains(t, command, "port: 9324")
	assert.True(t, strings.HasPrefix(svc.Image, "node:22"), "fauxqs 2.x needs Node >= 22.5, got %s", svc.Image)
	assert.Contains(t, strings.Join(svc.HealthCheck.Test, " "), "127.0.0.1:9324/health")
}

func TestPostgresInitScriptExists(t *testing.T) {
	t.Parallel()
	svc, err := loadProject(t).GetService("postgres")
	require.NoError(t, err)
	var binds int
	for _, v := range svc.Volumes {
		if v.Type != types.VolumeTypeBind {
			continue
		}
		binds++
		_, err := os.Stat(v.Source)
		assert.NoError(t, err, "bind mount source %s", v.Source)
		assert.True(t, v.ReadOnly, "bind mount %s read-only", v.Source)
	}
	assert.Equal(t, 1, binds)
}

// TestNoInterpolation keeps docker-compose.yml free of ${VARIABLE}s, so that
// `make up` does the same on every machine: the model read without
// interpolation must equal the one read with it.
func TestNoInterpolation(t *testing.T) {
	t.Parallel()
	dir, err := filepath.Abs(".")
	require.NoError(t, err)
	details := func() types.ConfigDetails {
		return types.ConfigDetails{
			WorkingDir:  dir,
			ConfigFiles: []types.ConfigFile{{Filename: filepath.Join(dir, "docker-compose.yml")}},
			Environment: types.Mapping{},
		}
	}
	interpolated, err := loader.LoadModelWithContext(t.Context(), details())
	require.NoError(t, err)
	raw, err := loader.LoadModelWithContext(t.Context(), details(), func(o *loader.Options) { o.SkipInterpolation = true })
	require.NoError(t, err)
	assert.Equal(t, raw, interpolated)
}

// TestEventpipeConfig loads compose/eventpipe.yaml as eventpipe would, for
// each broker the one variable can switch to, and checks that its addresses
// are the ones docker-compose.yml publishes.
func TestEventpipeConfig(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		environ []string
		kind    string
	}{
		{name: "as written", kind: config.KindRabbitMQ},
		{name: "switched to sqs", environ: []string{"EVENTPIPE_BROKER=sqs"}, kind: config.KindSQS},
		{name: "switched to postgres", environ: []string{"EVENTPIPE_BROKER=postgres"}, kind: config.KindPostgres},
		{name: "switched to memory", environ: []string{"EVENTPIPE_BROKER_KIND=memory"}, kind: config.KindMemory},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cfg, err := config.Load("eventpipe.yaml", tt.environ)
			require.NoError(t, err)
			assert.Equal(t, tt.kind, cfg.Broker.Kind)
			require.NoError(t, cfg.Validate())
		})
	}

	cfg, err := config.Load("eventpipe.yaml", nil)
	require.NoError(t, err)
	project := loadProject(t)
	hostPort := func(t *testing.T, service string, target uint32) string {
		t.Helper()
		svc, err := project.GetService(service)
		require.NoError(t, err)
		return "127.0.0.1:" + published(t, svc)[target]
	}

	rabbit, err := url.Parse(cfg.RabbitMQ.URL)
	require.NoError(t, err)
	assert.Equal(t, hostPort(t, "rabbitmq", 5672), rabbit.Host, "rabbitmq.url")

	sqs, err := url.Parse(cfg.SQS.Endpoint)
	require.NoError(t, err)
	assert.Equal(t, hostPort(t, "sqs", 9324), sqs.Host, "sqs.endpoint")
	assert.Equal(t, "us-east-1", cfg.SQS.Region, "the emulator knows only us-east-1")

	pg, err := url.Parse(cfg.Postgres.DSN)
	require.NoError(t, err)
	assert.Equal(t, hostPort(t, "postgres", 5432), pg.Host, "postgres.dsn")
	svc, err := project.GetService("postgres")
	require.NoError(t, err)
	db := svc.Environment["POSTGRES_DB"]
	require.NotNil(t, db)
	assert.Equal(t, "/"+*db, pg.Path, "postgres.dsn names the database POSTGRES_DB creates")
	assert.Equal(t, "trust", deref(svc.Environment["POSTGRES_HOST_AUTH_METHOD"]),
		"postgres.dsn has no password, so the service must trust local connections")
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// compose/rabbitmq/definitions.json must be what `eventpipe topology export`
// makes of config/topology/ today: regenerate it with `make definitions`.
func TestRabbitMQDefinitionsAreCurrent(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob("../config/topology/*.yaml")
	require.NoError(t, err)
	require.NotEmpty(t, files)
	sort.Strings(files)
	var tops []topology.Topology
	for _, f := range files {
		top, err := topology.Load(f)
		require.NoError(t, err, f)
		tops = append(tops, top)
	}
	merged, err := topology.Merge("eventpipe", tops...)
	require.NoError(t, err)
	want, err := rabbitmq.ExportDefinitions(merged, "/")
	require.NoError(t, err)
	got, err := os.ReadFile("rabbitmq/definitions.json")
	require.NoError(t, err)
	assert.Equal(t, string(want)+"\n", string(got), "compose/rabbitmq/definitions.json is stale: run `make definitions`")

	project := loadProject(t)
	svc, ok := project.Services["rabbitmq-topology"]
	require.True(t, ok, "the one-shot import service")
	assert.Contains(t, svc.Command, "/definitions.json")
}
