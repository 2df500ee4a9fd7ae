package config

import (
	"embed"
	"fmt"
	"strings"
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

// TopologyNames returns the specs whose topology file ships in the binary, in
// lexical order: each is a name TopologyFile takes ("booking", "stackup", …).
func TopologyNames() []string {
	// Cannot fail: the directory is embedded, so it exists.
	entries, _ := topologyFiles.ReadDir("topology")
	names := make([]string, 0, len(entries))
	for _, e := range entries {
		if name, ok := strings.CutSuffix(e.Name(), ".yaml"); ok && !e.IsDir() {
			names = append(names, name)
		}
	}
	return names
}
