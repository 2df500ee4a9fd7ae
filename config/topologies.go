package config

import (
	"embed"
	"fmt"
)

// The spec topologies (topology/<spec>.yaml) ship inside the binary: serve
// declares, routes and applies policies from the ones of the specs it runs,
// and `eventpipe topology` takes the same files from disk.
//
//go:embed topology/*.yaml
var topologyFiles embed.FS

// TopologyFile returns the shipped topology file of spec (e.g. "stackup").
func TopologyFile(spec string) ([]byte, error) {
	data, err := topologyFiles.ReadFile("topology/" + spec + ".yaml")
	if err != nil {
		return nil, fmt.Errorf("topology of spec %q: %w", spec, err)
	}
	return data, nil
}
