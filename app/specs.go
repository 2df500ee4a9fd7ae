package app

import "github.com/eventpipe/eventpipe/config"

// SpecNames are the names of every spec this binary runs (Modules), each
// also its configuration section ("interviews" → interviews.enabled).
func SpecNames() []string {
	var names []string
	for _, m := range Modules() {
		names = append(names, m.Name)
	}
	return names
}

// EnabledSpecs are the names of the specs cfg enables; none means serve
// consumes nothing.
func EnabledSpecs(cfg config.Config) []string {
	var names []string
	for _, m := range enabledModules(cfg) {
		names = append(names, m.Name)
	}
	return names
}
