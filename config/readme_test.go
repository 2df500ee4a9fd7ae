package config_test

import (
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventpipe/eventpipe/config"
)

// The README's configuration reference must list every key and its variable,
// so that a new field cannot ship undocumented.
func TestReadmeListsEveryKey(t *testing.T) {
	t.Parallel()
	readme, err := os.ReadFile("../README.md")
	require.NoError(t, err)
	text := string(readme)
	for _, v := range config.EnvVars() {
		assert.True(t, strings.Contains(text, "`"+v.Path+"`"), "README.md does not list key %s", v.Path)
		assert.True(t, strings.Contains(text, "`"+v.Name+"`"), "README.md does not list %s", v.Name)
	}
}
