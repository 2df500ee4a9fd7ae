-- The attempt ledger: how many times a message of an ordered (FIFO) classic
-- RabbitMQ queue came back to a consumer after the one holding it died (its
-- delivery flagged redelivered). Classic queues count nothing, and the
-- adapter's other way of counting — republishing a counted copy — would put
-- the message behind the later messages of its group; so the count lives
-- here, where it outlives a kill -9. The RabbitMQ adapter bumps a row before
-- it hands such a redelivery to its handler and deletes it once the delivery
-- is settled; rows untouched for long are expired by the next bump. Quorum
-- queues need none of this (x-delivery-count). See app/attemptledger and
-- docs/decisions/0016.

-- +goose Up
CREATE TABLE attempt_ledger (
    queue      text        NOT NULL,
    message_id text        NOT NULL,
    crashes    integer     NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (queue, message_id)
);
CREATE INDEX attempt_ledger_updated_at ON attempt_ledger (updated_at);

-- +goose Down
DROP TABLE attempt_ledger;
