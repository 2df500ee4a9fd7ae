package cli_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventpipe/eventpipe/app/cli"
)

// catalog schemas writes one self-contained draft-07 schema per message
// type, DIR/<spec>/<type>.json, that any validator compiles on its own and
// that refuses what the contract refuses.
func TestCatalogSchemasWritesOneFilePerMessageType(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	r := run(t, nil, "catalog", "schemas", "--out", dir)
	require.Equal(t, cli.ExitOK, r.code, r.stderr)
	assert.Contains(t, r.stdout, "wrote 26 schemas to "+dir)

	var files []string
	require.NoError(t, filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			rel, _ := filepath.Rel(dir, path)
			files = append(files, rel)
		}
		return err
	}))
	assert.Len(t, files, 26)
	for _, want := range []string{"stackup/analyze.resume.json", "stackup/realtime.document.notify.json", "interviews/interview.failed.json",
		"disputes/DisputeRaised.json", "disputes/S3EventNotification.json", "booking/BookingSessionEvent.json", "joinlink/JOIN_LINK_GENERATION.json"} {
		assert.Contains(t, files, filepath.FromSlash(want))
	}

	// A standalone validator, given only the file, compiles it and checks
	// the §9 smoke message.
	c := jsonschema.NewCompiler()
	c.AssertFormat()
	sch, err := c.Compile(filepath.Join(dir, "stackup", "analyze.resume.json"))
	require.NoError(t, err)
	smoke := `{"messageId":"smoke-1","messageType":"analyze.resume","version":"v1","traceId":"local-test","publishedAt":"2026-04-27T15:00:00Z","publisher":"manual","payload":{"resumeId":1,"filePath":"resumes/raw/1/test.pdf","analyzedDocumentId":1},"context":{"userId":1}}`
	var v any
	require.NoError(t, json.Unmarshal([]byte(smoke), &v))
	require.NoError(t, sch.Validate(v))
	require.NoError(t, json.Unmarshal([]byte(strings.Replace(smoke, `"resumeId":1`, `"resumeId":1,"githubToken":"x"`, 1)), &v))
	require.Error(t, sch.Validate(v), "strict: an unknown payload field is refused")

	r = run(t, nil, "catalog", "schemas", "--out", t.TempDir(), "--spec", "joinlink")
	require.Equal(t, cli.ExitOK, r.code, r.stderr)
	assert.Contains(t, r.stdout, "wrote 1 schemas")

	for _, args := range [][]string{{"catalog", "schemas"}, {"catalog", "schemas", "--out", dir, "--spec", "kafka"}} {
		r = run(t, nil, args...)
		assert.Equal(t, cli.ExitUsage, r.code, "%v", args)
	}
}

// topology export --format asyncapi prints the AsyncAPI 3.0 document of the
// given topology files, SQS names as sqs.queue_prefix makes them (the
// reference parser's test is app/asyncapi's).
func TestTopologyExportAsyncAPI(t *testing.T) {
	t.Parallel()
	args := []string{"topology", "export", "--format", "asyncapi"}
	for _, s := range []string{"booking", "disputes", "interviews", "joinlink", "stackup"} {
		args = append(args, "-f", specs+s+".yaml")
	}
	r := run(t, []string{"EVENTPIPE_SQS_QUEUE_PREFIX=stage-"}, args...)
	require.Equal(t, cli.ExitOK, r.code, r.stderr)
	var doc struct {
		AsyncAPI string `json:"asyncapi"`
		Channels map[string]struct {
			Address  string `json:"address"`
			Bindings struct {
				SQS struct {
					Queue struct {
						Name string `json:"name"`
					} `json:"queue"`
				} `json:"sqs"`
			} `json:"bindings"`
		} `json:"channels"`
		Components struct {
			Messages map[string]struct {
				Payload struct {
					Schema map[string]any `json:"schema"`
				} `json:"payload"`
			} `json:"messages"`
		} `json:"components"`
	}
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &doc))
	assert.Equal(t, "3.0.0", doc.AsyncAPI)
	assert.Equal(t, "stage-ai-analyze-resume", doc.Channels["stackup.ai.analyze.resume"].Bindings.SQS.Queue.Name)
	assert.Len(t, doc.Components.Messages, 26)
	for name, m := range doc.Components.Messages {
		assert.NotEmpty(t, m.Payload.Schema, name)
	}

	r = run(t, nil, "topology", "export", "-f", specs+"stackup.yaml", "--format", "openapi")
	assert.Equal(t, cli.ExitUsage, r.code)
}
