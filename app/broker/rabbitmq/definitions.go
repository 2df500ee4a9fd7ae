package rabbitmq

import (
	"encoding/json"
	"fmt"

	"github.com/eventpipe/eventpipe/app/topology"
)

// definitions is the subset of RabbitMQ's definitions format
// (https://www.rabbitmq.com/definitions.html) a topology needs.
type definitions struct {
	Vhosts    []defVhost    `json:"vhosts"`
	Exchanges []defExchange `json:"exchanges"`
	Queues    []defQueue    `json:"queues"`
	Bindings  []defBinding  `json:"bindings"`
}

type defVhost struct {
	Name string `json:"name"`
}

type defExchange struct {
	Name       string         `json:"name"`
	Vhost      string         `json:"vhost"`
	Type       string         `json:"type"`
	Durable    bool           `json:"durable"`
	AutoDelete bool           `json:"auto_delete"`
	Internal   bool           `json:"internal"`
	Arguments  map[string]any `json:"arguments"`
}

type defQueue struct {
	Name       string         `json:"name"`
	Vhost      string         `json:"vhost"`
	Durable    bool           `json:"durable"`
	AutoDelete bool           `json:"auto_delete"`
	Arguments  map[string]any `json:"arguments"`
}

type defBinding struct {
	Source          string         `json:"source"`
	Vhost           string         `json:"vhost"`
	Destination     string         `json:"destination"`
	DestinationType string         `json:"destination_type"`
	RoutingKey      string         `json:"routing_key"`
	Arguments       map[string]any `json:"arguments"`
}

// ExportDefinitions renders t as a RabbitMQ definitions document for vhost:
// the same exchanges, queues (dead-letter queues included, with the same
// arguments Apply declares) and bindings, for `rabbitmqctl import_definitions`,
// the management UI's import, or `load_definitions` at boot. The document
// names vhost under "vhosts" too, so importing creates the vhost if it is
// missing; user permissions on it are the operator's (definitions that
// carried users would carry password hashes). Importing over existing objects
// with other arguments is refused by RabbitMQ like a redeclaration; run
// `topology plan` first.
func ExportDefinitions(t topology.Topology, vhost string) ([]byte, error) {
	if vhost == "" {
		return nil, fmt.Errorf("export definitions: vhost is required (the default one is \"/\")")
	}
	c, err := compile(t)
	if err != nil {
		return nil, err
	}
	defs := definitions{
		Vhosts:    []defVhost{{Name: vhost}},
		Exchanges: []defExchange{},
		Queues:    []defQueue{},
		Bindings:  []defBinding{},
	}
	for _, e := range c.exchanges {
		defs.Exchanges = append(defs.Exchanges, defExchange{
			Name: e.Name, Vhost: vhost, Type: e.Type, Durable: true, Arguments: map[string]any{},
		})
	}
	for _, q := range c.queues {
		args := map[string]any{}
		for k, v := range q.args {
			args[k] = v
		}
		defs.Queues = append(defs.Queues, defQueue{Name: q.name, Vhost: vhost, Durable: true, Arguments: args})
	}
	for _, b := range c.bindings {
		defs.Bindings = append(defs.Bindings, defBinding{
			Source: b.exchange, Vhost: vhost, Destination: b.queue, DestinationType: "queue",
			RoutingKey: b.key, Arguments: map[string]any{},
		})
	}
	out, err := json.MarshalIndent(defs, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("export definitions: %w", err)
	}
	return append(out, '\n'), nil
}
