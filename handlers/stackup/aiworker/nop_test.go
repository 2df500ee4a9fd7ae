package aiworker_test

import "github.com/ThreeDotsLabs/watermill/message"

type nopPublisher struct{}

func (nopPublisher) Publish(string, ...*message.Message) error { return nil }
func (nopPublisher) Close() error                              { return nil }
