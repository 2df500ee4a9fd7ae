package compose_test

import (
	"bufio"
	"debug/elf"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/compose-spec/compose-go/v2/loader"
	"github.com/compose-spec/compose-go/v2/types"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventpipe/eventpipe/config"
)

// instruction is one Dockerfile instruction: its keyword in upper case and
// the rest of its line, continuations joined.
type instruction struct {
	cmd, args string
}

// stage is one FROM and the instructions after it.
type stage struct {
	from, name string
	body       []instruction
}

// parseDockerfile reads path as the Dockerfile reference describes it
// (comments, line continuations, FROM … AS name), enough for the checks
// below; no Docker engine is needed.
func parseDockerfile(t *testing.T, path string) []stage {
	t.Helper()
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	var (
		stages []stage
		line   string
	)
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		text := strings.TrimSpace(sc.Text())
		if strings.HasPrefix(text, "#") || (text == "" && line == "") {
			continue
		}
		if cont, ok := strings.CutSuffix(text, `\`); ok {
			line += cont + " "
			continue
		}
		line += text
		cmd, args, _ := strings.Cut(strings.TrimSpace(line), " ")
		line = ""
		in := instruction{cmd: strings.ToUpper(cmd), args: strings.TrimSpace(args)}
		if in.cmd == "FROM" {
			f := strings.Fields(in.args)
			s := stage{from: f[0]}
			if len(f) == 3 && strings.EqualFold(f[1], "AS") {
				s.name = f[2]
			}
			stages = append(stages, s)
			continue
		}
		require.NotEmpty(t, stages, "%s before the first FROM", in.cmd)
		stages[len(stages)-1].body = append(stages[len(stages)-1].body, in)
	}
	require.NoError(t, sc.Err())
	return stages
}

// all returns the arguments of every cmd instruction of s.
func (s stage) all(cmd string) []string {
	var out []string
	for _, in := range s.body {
		if in.cmd == cmd {
			out = append(out, in.args)
		}
	}
	return out
}

// The Dockerfile is a multi-stage build of a static binary that runs as a
// non-root user with a health check on /healthz, and its build command —
// run here with the local Go toolchain, as the build stage runs it — makes
// a statically linked eventpipe.
func TestDockerfile(t *testing.T) {
	t.Parallel()
	stages := parseDockerfile(t, "../Dockerfile")
	require.Len(t, stages, 2, "a build stage and the runtime stage")
	build, runtime := stages[0], stages[1]

	// The build stage's Go is go.mod's.
	mod, err := os.ReadFile("../go.mod")
	require.NoError(t, err)
	var goLine string
	for l := range strings.Lines(string(mod)) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(l), "go "); ok {
			goLine = v
		}
	}
	require.NotEmpty(t, goLine)
	assert.True(t, strings.HasPrefix(build.from, "golang:"+goLine), "build stage %s runs go.mod's Go %s", build.from, goLine)
	assert.Equal(t, "build", build.name)

	// The runtime stage: a static base (no libc), a non-root user.
	assert.True(t, strings.HasPrefix(runtime.from, "gcr.io/distroless/static"), "runtime base %s", runtime.from)
	users := runtime.all("USER")
	require.Len(t, users, 1)
	uid, _, _ := strings.Cut(users[0], ":")
	assert.NotContains(t, []string{"0", "root"}, uid, "runs as a non-root user")

	// The binary the build stage makes is the one the entrypoint and the
	// health check run.
	var runs []string
	for _, r := range build.all("RUN") {
		if strings.Contains(r, "go build") {
			runs = append(runs, r)
		}
	}
	require.Len(t, runs, 1, "one go build")
	buildCmd := runs[0]
	fields := strings.Fields(buildCmd)
	out := fields[slices.Index(fields, "-o")+1]
	copies := runtime.all("COPY")
	var binary string
	for _, c := range copies {
		if f := strings.Fields(c); f[0] == "--from=build" {
			assert.Equal(t, out, f[1], "copies what go build wrote")
			binary = f[2]
		}
	}
	require.NotEmpty(t, binary, "COPY --from=build")
	assert.Equal(t, []string{`["` + binary + `"]`}, runtime.all("ENTRYPOINT"))
	healthchecks := runtime.all("HEALTHCHECK")
	require.Len(t, healthchecks, 1)
	assert.Contains(t, healthchecks[0], `CMD ["`+binary+`", "healthcheck"]`, "probes /healthz with the binary itself (no curl in the image)")
	for _, c := range copies {
		if f := strings.Fields(c); !strings.HasPrefix(f[0], "--") {
			for _, src := range f[:len(f)-1] {
				_, err := os.Stat(filepath.Join("..", src))
				assert.NoError(t, err, "COPY source %s", src)
			}
		}
	}

	// The admin server listens where the image says and EXPOSE shows.
	var adminPort string
	for _, e := range runtime.all("ENV") {
		for _, kv := range strings.Fields(e) {
			if v, ok := strings.CutPrefix(kv, "EVENTPIPE_ADMIN_ADDR="); ok {
				_, adminPort, err = net.SplitHostPort(v)
				require.NoError(t, err)
			}
		}
	}
	require.NotEmpty(t, adminPort, "ENV EVENTPIPE_ADMIN_ADDR")
	assert.Contains(t, strings.Fields(strings.Join(runtime.all("EXPOSE"), " ")), adminPort)

	if testing.Short() {
		t.Skip("-short: the build command is not run")
	}
	// The build stage's command, as its shell would run it, from the
	// repository root, writing into a temporary directory.
	dir := t.TempDir()
	cmd := exec.CommandContext(t.Context(), "sh", "-c", strings.Replace(buildCmd, out, filepath.Join(dir, "eventpipe"), 1))
	cmd.Dir = ".."
	cmd.Env = append(os.Environ(), "VERSION=dockerfile-test")
	outp, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s\n%s", buildCmd, outp)
	bin, err := elf.Open(filepath.Join(dir, "eventpipe"))
	require.NoError(t, err)
	defer bin.Close()
	for _, p := range bin.Progs {
		assert.NotEqual(t, elf.PT_INTERP, p.Type, "statically linked: no dynamic loader")
	}
	libs, err := bin.ImportedLibraries()
	require.NoError(t, err)
	assert.Empty(t, libs, "statically linked: no shared libraries")
	version, err := exec.CommandContext(t.Context(), filepath.Join(dir, "eventpipe"), "version").CombinedOutput()
	require.NoError(t, err, "%s", version)
	assert.Contains(t, string(version), "eventpipe dockerfile-test")
}

// .dockerignore keeps the build context small without leaving out what the
// build stage copies.
func TestDockerignore(t *testing.T) {
	t.Parallel()
	data, err := os.ReadFile("../.dockerignore")
	require.NoError(t, err)
	for l := range strings.Lines(string(data)) {
		l = strings.TrimSpace(l)
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		for _, needed := range []string{"go.mod", "go.sum", "app", "handlers", "middleware", "config", "migrations"} {
			matched, err := filepath.Match(l, needed)
			require.NoError(t, err)
			assert.False(t, matched, ".dockerignore %q leaves out %s", l, needed)
		}
	}
}

// The eventpipe presets of docker-compose.yml: one per broker, each built
// from the Dockerfile, running its config/examples file against the
// services by their compose names, with the image's health check, behind a
// profile so that `make up` starts the services alone.
func TestComposeEventpipePresets(t *testing.T) {
	t.Parallel()
	dir, err := filepath.Abs(".")
	require.NoError(t, err)
	project, err := loader.LoadWithContext(t.Context(), types.ConfigDetails{
		WorkingDir:  dir,
		ConfigFiles: []types.ConfigFile{{Filename: filepath.Join(dir, "docker-compose.yml")}},
		Environment: types.Mapping{},
	}, loader.WithProfiles([]string{config.KindRabbitMQ, config.KindSQS, config.KindPostgres}))
	require.NoError(t, err)
	for _, kind := range []string{config.KindRabbitMQ, config.KindSQS, config.KindPostgres} {
		svc, err := project.GetService("eventpipe-" + kind)
		require.NoError(t, err, kind)
		assert.Equal(t, []string{kind}, svc.Profiles, "started only with --profile %s", kind)
		require.NotNil(t, svc.Build, kind)
		assert.Equal(t, filepath.Dir(dir), svc.Build.Context, "built from the repository root")
		assert.Equal(t, "Dockerfile", svc.Build.Dockerfile)
		assert.Equal(t, types.ShellCommand{"serve", "--config", "/etc/eventpipe/examples/" + kind + ".yaml"}, svc.Command)
		_, err = os.Stat(filepath.Join("..", "config", "examples", kind+".yaml"))
		require.NoError(t, err, "the preset's file ships in the image from config/examples")

		env := map[string]string{}
		for k, v := range svc.Environment {
			env[k] = deref(v)
		}
		cfg, err := config.Load(filepath.Join("..", "config", "examples", kind+".yaml"), environ(env))
		require.NoError(t, err, kind)
		assert.Contains(t, cfg.RabbitMQ.URL, "@rabbitmq:5672", kind)
		assert.Equal(t, "http://sqs:9324", cfg.SQS.Endpoint, kind)
		assert.Contains(t, cfg.Postgres.DSN, "@postgres:5432/eventpipe", kind)
		assert.GreaterOrEqual(t, len(env["EVENTPIPE_REALTIME_TOKEN_SECRET"]), 32, "StackUp's realtime role needs a secret")
		_, gatewayPort, err := net.SplitHostPort(cfg.Booking.GatewayAddr)
		require.NoError(t, err)

		ports := published(t, svc)
		assert.Equal(t, "9090", ports[9090], "admin")
		assert.Equal(t, "8080", ports[8080], "realtime")
		assert.Equal(t, gatewayPort, ports[8084], "booking gateway")
		require.NotNil(t, svc.HealthCheck)
		assert.Equal(t, types.HealthCheckTest{"CMD", "/usr/local/bin/eventpipe", "healthcheck"}, svc.HealthCheck.Test)
		for dep, d := range svc.DependsOn {
			_, err := project.GetService(dep)
			require.NoError(t, err, "%s depends on %s", kind, dep)
			assert.Contains(t, []string{types.ServiceConditionHealthy, types.ServiceConditionCompletedSuccessfully}, d.Condition, "%s waits for %s", kind, dep)
		}
		switch kind {
		case config.KindRabbitMQ:
			assert.Contains(t, svc.DependsOn, "rabbitmq-topology", "after the definitions are imported")
		case config.KindSQS:
			assert.Contains(t, svc.DependsOn, "sqs")
			assert.NotContains(t, svc.DependsOn, "rabbitmq")
		}
	}
	plain := loadProject(t)
	assert.NotContains(t, plain.ServiceNames(), "eventpipe-rabbitmq", "make up starts the services alone")
}

// environ turns a compose environment into KEY=VALUE strings.
func environ(m map[string]string) []string {
	var out []string
	for k, v := range m {
		out = append(out, k+"="+v)
	}
	return out
}
