// Package eventbridge is the join-link spec's scheduling adapter on AWS
// (AwsSchedulerService, comp-04): joinlink.Schedules over Amazon EventBridge
// Scheduler one-time schedules. The composition root hands it to the spec
// when the broker is SQS; handlers never import an AWS service client.
package eventbridge

import (
	"context"
	"errors"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/scheduler"
	"github.com/aws/aws-sdk-go-v2/service/scheduler/types"

	"github.com/eventpipe/eventpipe/handlers/joinlink"
)

// SchedulerAPI is the part of the EventBridge Scheduler client the adapter
// uses: exactly the actions the spec's least-privilege policy grants
// (scheduler:CreateSchedule, UpdateSchedule, DeleteSchedule; no
// GetSchedule, so an upsert is an update that falls back to a create).
type SchedulerAPI interface {
	CreateSchedule(ctx context.Context, in *scheduler.CreateScheduleInput, opts ...func(*scheduler.Options)) (*scheduler.CreateScheduleOutput, error)
	UpdateSchedule(ctx context.Context, in *scheduler.UpdateScheduleInput, opts ...func(*scheduler.Options)) (*scheduler.UpdateScheduleOutput, error)
	DeleteSchedule(ctx context.Context, in *scheduler.DeleteScheduleInput, opts ...func(*scheduler.Options)) (*scheduler.DeleteScheduleOutput, error)
}

var _ SchedulerAPI = (*scheduler.Client)(nil)

// Schedules is AwsSchedulerService (comp-04): each session's
// schedule is an EventBridge Scheduler one-time schedule named
// join-link-<id>, at(FireAt) in UTC with no flexible window, whose target is
// the join-link SQS queue (TargetQueueARN) with the JOIN_LINK_GENERATION
// message as its input, delivered with RoleARN (the execution role), in
// Group, and deleted by Scheduler after it fired (ActionAfterCompletion
// DELETE). EventBridge delivers it to the queue; nothing in process
// dispatches it.
type Schedules struct {
	Client SchedulerAPI
	// TargetQueueARN is the join-link-generation queue's ARN
	// (AWS_SCHEDULER_TARGET_QUEUE_ARN). Required.
	TargetQueueARN string
	// RoleARN is the execution role Scheduler assumes to send to the queue
	// (AWS_SCHEDULER_EXECUTION_ROLE_ARN). Required.
	RoleARN string
	// Group is the schedule group (AWS_SCHEDULER_GROUP_NAME); "" is
	// Scheduler's "default".
	Group string
}

var _ joinlink.Schedules = (*Schedules)(nil)

// atLayout is Scheduler's one-time expression: at(yyyy-mm-ddThh:mm:ss),
// read in ScheduleExpressionTimezone (UTC here).
const atLayout = "2006-01-02T15:04:05"

// Upsert implements joinlink.Schedules: UpdateSchedule, and CreateSchedule when
// Scheduler has none of that name (a create that finds one made meanwhile
// is updated again).
func (e *Schedules) Upsert(ctx context.Context, s joinlink.Schedule) error {
	expr := "at(" + s.FireAt.UTC().Format(atLayout) + ")"
	target := &types.Target{Arn: aws.String(e.TargetQueueARN), RoleArn: aws.String(e.RoleARN), Input: aws.String(string(s.Body))}
	window := &types.FlexibleTimeWindow{Mode: types.FlexibleTimeWindowModeOff}
	update := func() error {
		_, err := e.Client.UpdateSchedule(ctx, &scheduler.UpdateScheduleInput{
			Name: aws.String(s.Name), GroupName: e.group(), ScheduleExpression: aws.String(expr),
			ScheduleExpressionTimezone: aws.String("UTC"), FlexibleTimeWindow: window, Target: target,
			ActionAfterCompletion: types.ActionAfterCompletionDelete,
		})
		return err
	}
	err := update()
	var missing *types.ResourceNotFoundException
	if !errors.As(err, &missing) {
		return wrapScheduler("update", s.Name, err)
	}
	_, err = e.Client.CreateSchedule(ctx, &scheduler.CreateScheduleInput{
		Name: aws.String(s.Name), GroupName: e.group(), ScheduleExpression: aws.String(expr),
		ScheduleExpressionTimezone: aws.String("UTC"), FlexibleTimeWindow: window, Target: target,
		ActionAfterCompletion: types.ActionAfterCompletionDelete,
	})
	var conflict *types.ConflictException
	if errors.As(err, &conflict) {
		err = update()
	}
	return wrapScheduler("create", s.Name, err)
}

// Delete implements joinlink.Schedules; a schedule Scheduler does not have (never
// made, or deleted after it fired) is not an error.
func (e *Schedules) Delete(ctx context.Context, name string) error {
	_, err := e.Client.DeleteSchedule(ctx, &scheduler.DeleteScheduleInput{Name: aws.String(name), GroupName: e.group()})
	var missing *types.ResourceNotFoundException
	if errors.As(err, &missing) {
		return nil
	}
	return wrapScheduler("delete", name, err)
}

func (e *Schedules) group() *string {
	if e.Group == "" {
		return nil
	}
	return aws.String(e.Group)
}

func wrapScheduler(op, name string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("EventBridge Scheduler %s %s: %w", op, name, err)
}

// New returns the adapter for c, with an EventBridge Scheduler client from
// the AWS SDK's default chain (credentials, AWS_REGION), c.Region and
// c.Endpoint overriding it when set (an emulator, a test server). It checks
// that the target and the role are set; it calls no AWS API.
func New(ctx context.Context, c joinlink.EventBridgeConfig) (*Schedules, error) {
	switch {
	case c.TargetQueueARN == "":
		return nil, errors.New("EventBridge Scheduler: no target queue ARN (joinlink.scheduler_target_queue_arn, or AWS_SCHEDULER_TARGET_QUEUE_ARN)")
	case c.RoleARN == "":
		return nil, errors.New("EventBridge Scheduler: no execution role ARN (joinlink.scheduler_execution_role_arn, or AWS_SCHEDULER_EXECUTION_ROLE_ARN)")
	}
	var opts []func(*awsconfig.LoadOptions) error
	if c.Region != "" {
		opts = append(opts, awsconfig.WithRegion(c.Region))
	}
	cfg, err := awsconfig.LoadDefaultConfig(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("EventBridge Scheduler: AWS configuration: %w", err)
	}
	client := scheduler.NewFromConfig(cfg, func(o *scheduler.Options) {
		if c.Endpoint != "" {
			o.BaseEndpoint = aws.String(c.Endpoint)
		}
	})
	return &Schedules{Client: client, TargetQueueARN: c.TargetQueueARN, RoleARN: c.RoleARN, Group: c.Group}, nil
}
