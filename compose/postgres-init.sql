-- Runs once, when the postgres service first initialises its data volume:
-- the database the tests use by default (EVENTPIPE_TEST_POSTGRES_DSN,
-- postgres://postgres@127.0.0.1:5432/test). compose/eventpipe.yaml uses the
-- eventpipe database that POSTGRES_DB creates.
CREATE DATABASE test;
