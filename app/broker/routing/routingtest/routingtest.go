// Package routingtest holds the routing fixtures shared by the routing tests
// of several packages.
package routingtest

import "github.com/eventpipe/eventpipe/app/topology"

// Topology is a StackUp-like topology: a topic exchange with exact and
// wildcard keys, a realtime queue bound to wildcard keys, a fanout exchange,
// DLQs.
func Topology() topology.Topology {
	dlq := func(q string) *topology.DeadLetter { return &topology.DeadLetter{Queue: q + ".dlq"} }
	return topology.Topology{
		Name: "routing",
		Exchanges: []topology.Exchange{
			{Name: "core", Type: topology.Topic},
			{Name: "broadcast", Type: topology.Fanout},
		},
		Queues: []topology.Queue{
			{Name: "q.generate", MaxReceives: 3, DeadLetter: dlq("q.generate")},
			{Name: "q.analyze", MaxReceives: 3, DeadLetter: dlq("q.analyze")},
			{Name: "q.realtime"},
		},
		Bindings: []topology.Binding{
			{Exchange: "core", Queue: "q.generate", Pattern: "generate.questions"},
			{Exchange: "core", Queue: "q.analyze", Pattern: "analyze.*"},
			{Exchange: "core", Queue: "q.realtime", Pattern: "*.completed"},
			{Exchange: "core", Queue: "q.realtime", Pattern: "#.failed"},
			{Exchange: "core", Queue: "q.realtime", Pattern: "analyze.resume"},
			{Exchange: "broadcast", Queue: "q.generate"},
			{Exchange: "broadcast", Queue: "q.realtime"},
		},
	}
}
