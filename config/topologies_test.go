package config_test

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventpipe/eventpipe/app/topology"
	"github.com/eventpipe/eventpipe/config"
)

// TopologyNames lists every file of config/topology, and each name opens
// with TopologyFile as a valid topology of that name.
func TestTopologyNames(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob("topology/*.yaml")
	require.NoError(t, err)
	var onDisk []string
	for _, f := range files {
		onDisk = append(onDisk, strings.TrimSuffix(filepath.Base(f), ".yaml"))
	}
	names := config.TopologyNames()
	assert.Equal(t, onDisk, names, "the embedded files are config/topology/*.yaml")
	assert.Subset(t, names, []string{"booking", "disputes", "interviews", "joinlink", "stackup"})
	for _, name := range names {
		data, err := config.TopologyFile(name)
		require.NoError(t, err, name)
		top, err := topology.Parse(data)
		require.NoError(t, err, name)
		assert.Equal(t, name, top.Name, "the file of %s names its spec", name)
	}
}

func TestTopologyFileUnknown(t *testing.T) {
	t.Parallel()
	_, err := config.TopologyFile("nope")
	assert.ErrorContains(t, err, `topology of spec "nope"`)
}
