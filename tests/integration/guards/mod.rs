//! The shared guards against DynamoDB Local (and an SSM stand-in over HTTP).

mod client_address;
mod cors;
mod fault_proxy;
mod idempotency_layer;
mod internal_callers;
mod kill_switch;
mod late_writes;
mod layers;
mod limiter_faults;
mod once;
mod published_limits;
mod rate_limits;
mod request_counts;
mod secrets;
mod shards;
mod single_table;
mod transaction;
mod windows;
