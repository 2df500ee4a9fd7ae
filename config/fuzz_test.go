package config_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/eventpipe/eventpipe/config"
)

// FuzzLoad feeds arbitrary bytes to Load as a config file (seeds in
// testdata/fuzz/FuzzLoad). Load must never panic, must accept only
// configurations that validate, and must explain every rejection as problems.
func FuzzLoad(f *testing.F) {
	example, err := os.ReadFile("example.yaml")
	require.NoError(f, err)
	f.Add(example)

	f.Fuzz(func(t *testing.T, data []byte) {
		path := filepath.Join(t.TempDir(), "fuzz.yaml")
		require.NoError(t, os.WriteFile(path, data, 0o600))
		cfg, err := config.Load(path, nil)
		if err == nil {
			require.NoError(t, cfg.Validate(), "Load accepted a config that does not validate")
			return
		}
		var ve *config.ValidationError
		require.ErrorAs(t, err, &ve, "a readable file's content gave an error other than *ValidationError")
		require.NotEmpty(t, ve.Problems, "*ValidationError without problems")
		for _, p := range ve.Problems {
			require.NotEmpty(t, p.Message, "problem without a message: %+v", p)
		}
	})
}
