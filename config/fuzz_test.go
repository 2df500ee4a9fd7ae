package config_test

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/eventpipe/eventpipe/config"
)

// FuzzLoad feeds arbitrary bytes to Load as a config file (seeds in
// testdata/fuzz/FuzzLoad). Load must never panic, must accept only
// configurations that validate, and must explain every rejection as problems.
func FuzzLoad(f *testing.F) {
	example, err := os.ReadFile("example.yaml")
	if err != nil {
		f.Fatal(err)
	}
	f.Add(example)

	f.Fuzz(func(t *testing.T, data []byte) {
		path := filepath.Join(t.TempDir(), "fuzz.yaml")
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
		cfg, err := config.Load(path, nil)
		if err == nil {
			if verr := cfg.Validate(); verr != nil {
				t.Fatalf("Load accepted a config that does not validate: %v", verr)
			}
			return
		}
		var ve *config.ValidationError
		if !errors.As(err, &ve) {
			t.Fatalf("a readable file's content gave an error other than *ValidationError: %v", err)
		}
		if len(ve.Problems) == 0 {
			t.Fatal("*ValidationError without problems")
		}
		for _, p := range ve.Problems {
			if p.Message == "" {
				t.Fatalf("problem without a message: %+v", p)
			}
		}
	})
}
