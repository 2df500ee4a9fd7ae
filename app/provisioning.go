package app

import (
	"github.com/eventpipe/eventpipe/app/broker/rabbitmq"
	"github.com/eventpipe/eventpipe/app/topology"
)

// ExportDefinitions renders t as a RabbitMQ definitions document for vhost,
// the objects `topology apply` would declare, for `rabbitmqctl
// import_definitions` or the management UI's import. It needs no broker:
// the CLI's `topology export` calls it, so that app/cli reaches adapters
// only through this package.
func ExportDefinitions(t topology.Topology, vhost string) ([]byte, error) {
	return rabbitmq.ExportDefinitions(t, vhost)
}
