"""The OpenWhisk adapter: Kafka in/out, REST metadata, the Redis ledger and the scheduler service."""
