package app

import (
	"github.com/eventpipe/eventpipe/app/asyncapi"
	"github.com/eventpipe/eventpipe/app/broker/rabbitmq"
	"github.com/eventpipe/eventpipe/app/broker/sqs"
	"github.com/eventpipe/eventpipe/app/schemas"
	"github.com/eventpipe/eventpipe/app/topology"
	"github.com/eventpipe/eventpipe/config"
)

// ExportDefinitions renders t as a RabbitMQ definitions document for vhost,
// the objects `topology apply` would declare, for `rabbitmqctl
// import_definitions` or the management UI's import. It needs no broker:
// the CLI's `topology export` calls it, so that app/cli reaches adapters
// only through this package.
func ExportDefinitions(t topology.Topology, vhost string) ([]byte, error) {
	return rabbitmq.ExportDefinitions(t, vhost)
}

// ExportAsyncAPI renders tops, each with its spec's message catalog (package
// schemas), as an AsyncAPI 3.0 document (package asyncapi), with the SQS
// queue names this deployment maps the topology's to (sqs.queue_prefix) and
// the AMQP objects in vhost.
// Like ExportDefinitions it needs no broker; `topology export --format
// asyncapi` calls it.
func ExportAsyncAPI(cfg config.Config, tops []topology.Topology, version, vhost string) ([]byte, error) {
	cat, err := schemas.Load()
	if err != nil {
		return nil, err
	}
	return asyncapi.Document(tops, cat, asyncapi.Options{
		Version:      version,
		VHost:        vhost,
		SQSQueueName: func(name string) string { return sqs.QueueName(cfg.SQS.QueuePrefix, name) },
	})
}
