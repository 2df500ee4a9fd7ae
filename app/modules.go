package app

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/eventpipe/eventpipe/app/eventbridge"
	"github.com/eventpipe/eventpipe/app/route"
	"github.com/eventpipe/eventpipe/app/s3store"
	"github.com/eventpipe/eventpipe/app/spec"
	"github.com/eventpipe/eventpipe/app/topology"
	"github.com/eventpipe/eventpipe/config"
	"github.com/eventpipe/eventpipe/handlers/booking"
	"github.com/eventpipe/eventpipe/handlers/demo"
	"github.com/eventpipe/eventpipe/handlers/disputes"
	"github.com/eventpipe/eventpipe/handlers/interviews"
	"github.com/eventpipe/eventpipe/handlers/joinlink"
	"github.com/eventpipe/eventpipe/handlers/stackup"
	"github.com/eventpipe/eventpipe/handlers/stackup/aiworker/realproc"
)

// Modules lists every spec this binary runs, in the order their routes are
// added. Adding a spec is a package under handlers/ and one entry here (see
// ARCHITECTURE.md).
func Modules() []spec.Module {
	return []spec.Module{
		demo.Module,
		interviews.Module,
		stackup.NewModule(stackup.Adapters{Objects: func(ctx context.Context, c stackup.ObjectsConfig) (realproc.Objects, error) {
			return s3store.NewBucket(ctx, s3store.BucketConfig{Bucket: c.Bucket, Region: c.Region, Endpoint: c.Endpoint, PathStyle: c.PathStyle})
		}}),
		disputes.NewModule(disputes.Adapters{S3: func(ctx context.Context, c disputes.S3Config) (disputes.Objects, error) {
			return s3store.New(ctx, c)
		}}),
		booking.Module,
		joinlink.NewModule(joinlink.Adapters{EventBridge: func(ctx context.Context, c joinlink.EventBridgeConfig) (joinlink.Schedules, error) {
			return eventbridge.New(ctx, c)
		}}),
	}
}

// enabledModules are the modules cfg enables.
func enabledModules(cfg config.Config) []spec.Module {
	var on []spec.Module
	for _, m := range Modules() {
		if m.Enabled(cfg) {
			on = append(on, m)
		}
	}
	return on
}

// SpecTopology merges the topologies of the specs cfg enables, as this
// deployment declares them (DeployedTopology). It has no queues when none of
// them declares a topology.
func SpecTopology(cfg config.Config) (topology.Topology, error) {
	var tops []topology.Topology
	for _, m := range enabledModules(cfg) {
		if m.Topology == "" {
			continue
		}
		data, err := config.TopologyFile(m.Topology)
		if err != nil {
			return topology.Topology{}, err
		}
		t, err := topology.Parse(data)
		if err != nil {
			return topology.Topology{}, fmt.Errorf("spec %s: %w", m.Name, err)
		}
		tops = append(tops, t)
	}
	if len(tops) == 0 {
		return topology.Topology{Name: "none"}, nil
	}
	merged, err := topology.Merge("eventpipe", tops...)
	if err != nil {
		return topology.Topology{}, err
	}
	return DeployedTopology(cfg, merged)
}

// DeployedTopology is t as this deployment declares it: every queue of the
// type rabbitmq.queue_type names, unless it says as-declared
// (topology.WithQueueType), and every queue that receives S3 event
// notifications from the bucket its setting names (topology.WithS3Buckets,
// s3Buckets). Everything that compiles a topology for a broker goes through
// it — serve's broker (SpecTopology), `topology plan`, `apply` and `export`
// — so that they never disagree about a queue's arguments or access policy.
func DeployedTopology(cfg config.Config, t topology.Topology) (topology.Topology, error) {
	out, err := t.WithQueueType(cfg.RabbitMQ.QueueType)
	if err != nil {
		return topology.Topology{}, fmt.Errorf("rabbitmq.queue_type: %w", err)
	}
	return out.WithS3Buckets(func(from string) (string, string, error) { return s3Bucket(cfg, from) })
}

// s3Bucket is the bucket (and its owner's account) the setting from holds,
// for a topology's s3_notifications.from.
func s3Bucket(cfg config.Config, from string) (bucket, account string, err error) {
	switch from {
	case "disputes.s3_bucket":
		return cfg.Disputes.S3Bucket, cfg.Disputes.S3SourceAccount, nil
	default:
		return "", "", fmt.Errorf("%q is not a setting that names an S3 bucket (known: disputes.s3_bucket)", from)
	}
}

// Catalog returns every route this binary knows, enabled or not. `eventpipe
// publish` validates bodies against it; its handlers must not be run.
func Catalog() route.Set {
	var set route.Set
	for _, m := range Modules() {
		set = append(set, m.Catalog()...)
	}
	return set
}

// fanoutTopics are the topics the enabled specs need delivered to every
// instance (spec.Module.FanoutTopics).
func fanoutTopics(cfg config.Config) []string {
	var topics []string
	for _, m := range enabledModules(cfg) {
		if m.FanoutTopics != nil {
			topics = append(topics, m.FanoutTopics(cfg)...)
		}
	}
	return topics
}

// Commands returns the commands the specs add to the command line
// (spec.Module.Commands).
func Commands(env spec.CommandEnv) []*cobra.Command {
	var cmds []*cobra.Command
	for _, m := range Modules() {
		if m.Commands != nil {
			cmds = append(cmds, m.Commands(env)...)
		}
	}
	return cmds
}
